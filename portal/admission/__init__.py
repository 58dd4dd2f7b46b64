"""The runtime placement webhook's side: the decision (``decide``, ``placing``), its time budget
(``budget``), the queue that records decisions (``queue``) and the capacity they hold
(``reservations``).

Nothing is imported here, so that importing the queue (the worker and the watcher do) never
loads the decision.
"""
