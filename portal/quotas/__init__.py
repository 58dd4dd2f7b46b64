"""A shared fleet: quotas per project and site, priority classes ordering what waits,
and what every unit used and cost.

* ``models``: quotas, priority classes, the quota queue (``Workload``), prices;
* ``admission``: the pure decision (does a unit fit its project's quota at a site, and why
  not), no Django;
* the decision against the database, for the advance: ``admit`` (which ready units of a run
  may start now), through ``submitted`` (units placed at submission, at their site) and
  ``runtime`` (units placed at run time, for the eligible sites with room), in the order and
  with the fair sharing of ``fairness``, under the locks of ``queue``; ``waking`` (the runs to
  advance once quota frees or a quota changes);
* what is held and where: ``holdings`` (what admitted units hold), ``scopes`` (the quotas,
  a site's own and its groups', that cover a site), ``priorities`` (a run's priority class);
* ``overview``: what the pages show (a queued unit's place, every quota's use);
* ``usage``: resource-seconds and cost of units, runs and projects (``Decimal``, never float);
  ``budgets``: spending against a project's budget.
"""
