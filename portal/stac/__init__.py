"""A STAC API over the inventory: datasets as collections, replicas as alternate assets."""
