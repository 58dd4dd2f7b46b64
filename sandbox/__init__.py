"""Sandbox fleet: a Kubernetes-API-compatible Karmada + Argo simulator (see README.md)."""
