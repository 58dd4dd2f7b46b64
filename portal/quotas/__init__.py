"""A shared fleet: quotas per project and site, priority classes ordering what waits,
and what every unit used and cost.

* ``models``: quotas, priority classes, the quota queue (``Workload``), prices;
* ``admission``: the pure decision (does a unit fit its project's quota at a site, and why
  not), no Django;
* ``services``: the decision against the database, under a per-site lock, for the advance;
* ``usage``: resource-seconds and cost of units, runs and projects (``Decimal``, never float).
"""
