"""The runtime placement webhook's side: the decision (``decide``), its time budget
(``budget``) and the queue that records decisions (``queue``).

Nothing is imported here, so that importing the queue (the worker and the watcher do) never
loads the decision.
"""
