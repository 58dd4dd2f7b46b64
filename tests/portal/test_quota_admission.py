"""The quota decision alone (``portal.quotas.admission``, pure code): nominal quota, borrowing
limits, the cohort's unused quota, fair sharing, and the reason a queued unit shows."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from portal.quotas.admission import (
    RESOURCES,
    Amount,
    Limit,
    SiteQuotas,
    admit_with,
    borrows,
    fair_turn,
    fits,
)

CPU = 1000  # millicores per CPU
GI = 2**30


def quotas(limits: dict[str, Limit], used: dict[str, Amount] | None = None) -> SiteQuotas:
    return SiteQuotas("site-b", limits, used or {})


def test_within_nominal_is_admitted_and_the_last_cpu_too() -> None:
    q = quotas({"eo-demo": Limit(Amount(16 * CPU), (0, 0, 0))}, {"eo-demo": Amount(15 * CPU)})
    assert fits("eo-demo", Amount(CPU), q) is None


def test_over_nominal_without_borrowing_waits_with_the_issues_words() -> None:
    q = quotas(
        {"eo-demo": Limit(Amount(16 * CPU), (0, 0, 0)), "other": Limit(Amount(16 * CPU))},
        {"eo-demo": Amount(16 * CPU)},
    )
    assert (
        fits("eo-demo", Amount(CPU), q) == "eo-demo uses 16 of 16 CPU at site-b; waiting for quota"
    )


def test_memory_and_gpus_are_named_in_the_reason() -> None:
    q = quotas({"p": Limit(Amount(0, 8 * GI, 1), (0, 0, 0))}, {"p": Amount(0, 6 * GI, 1)})
    assert (
        fits("p", Amount(0, 4 * GI), q) == "p uses 6Gi of 8Gi memory at site-b; waiting for quota"
    )
    assert fits("p", Amount(0, 0, 1), q) == "p uses 1 of 1 GPUs at site-b; waiting for quota"


def test_a_project_without_a_quota_at_the_site_is_not_limited() -> None:
    q = quotas({"other": Limit(Amount(CPU))}, {"other": Amount(CPU)})
    assert fits("free", Amount(1000 * CPU), q) is None


def test_borrowing_takes_only_what_the_others_leave_unused() -> None:
    limits = {"a": Limit(Amount(4 * CPU)), "b": Limit(Amount(4 * CPU))}
    # b uses 1 of its 4: a may borrow 3, not 4.
    q = quotas(limits, {"a": Amount(4 * CPU), "b": Amount(CPU)})
    assert fits("a", Amount(3 * CPU), q) is None
    why = fits("a", Amount(4 * CPU), q)
    assert why is not None and "unused quota there is taken" in why


def test_the_borrowing_limit_bounds_what_is_borrowed() -> None:
    limits = {"a": Limit(Amount(4 * CPU), (2 * CPU, None, None)), "b": Limit(Amount(8 * CPU))}
    q = quotas(limits, {"a": Amount(4 * CPU)})
    assert fits("a", Amount(2 * CPU), q) is None
    assert fits("a", Amount(3 * CPU), q) == (
        "a uses 4 of 4 CPU at site-b (and may borrow 2 more); waiting for quota"
    )


def test_a_project_within_nominal_is_never_blocked_by_anothers_borrowing() -> None:
    limits = {"a": Limit(Amount(8 * CPU)), "b": Limit(Amount(8 * CPU))}
    # a borrowed all of b's quota while b was idle.
    q = quotas(limits, {"a": Amount(16 * CPU)})
    assert fits("b", Amount(8 * CPU), q) is None


def test_fair_sharing_lets_the_project_borrowing_less_go_first() -> None:
    limits = {
        "a": Limit(Amount(4 * CPU)),
        "b": Limit(Amount(4 * CPU)),
        "idle": Limit(Amount(8 * CPU)),
    }
    q = quotas(limits, {"a": Amount(7 * CPU), "b": Amount(5 * CPU)})
    assert borrows("a", Amount(CPU), q) and borrows("b", Amount(CPU), q)
    assert fair_turn("b", ["a"], q)
    assert not fair_turn("a", ["b"], q)


def test_fair_sharing_follows_the_weights() -> None:
    limits = {
        "a": Limit(Amount(4 * CPU), weight=Decimal(4)),
        "b": Limit(Amount(4 * CPU)),
        "idle": Limit(Amount(8 * CPU)),
    }
    # a borrows 3, b 1; a's weight of 4 makes its share the smaller.
    q = quotas(limits, {"a": Amount(7 * CPU), "b": Amount(5 * CPU)})
    assert fair_turn("a", ["b"], q)


amounts = st.builds(
    Amount,
    st.integers(0, 64).map(lambda n: n * 500),
    st.integers(0, 64).map(lambda n: n * GI // 2),
    st.integers(0, 4),
)
borrow_limit = st.one_of(st.none(), st.integers(0, 32 * CPU))


@settings(max_examples=300, deadline=None)
@given(
    nominals=st.lists(amounts, min_size=1, max_size=4),
    borrowing=st.lists(borrow_limit, min_size=4, max_size=4),
    requests=st.lists(st.tuples(st.integers(0, 3), amounts), max_size=40),
)
def test_admitting_one_by_one_keeps_every_bound(
    nominals: list[Amount], borrowing: list[int | None], requests: list[tuple[int, Amount]]
) -> None:
    """Whatever arrives in whatever order: nobody above nominal plus its borrowing limit, the
    borrowed total never above what the cohort left unused, and a request within its
    project's nominal quota always admitted."""
    names = [f"p{i}" for i in range(len(nominals))]
    limits = {
        n: Limit(nom, (borrowing[i], None, None) if i < len(borrowing) else (None, None, None))
        for i, (n, nom) in enumerate(zip(names, nominals, strict=True))
    }
    q = quotas(limits)
    for index, request in requests:
        project = names[index % len(names)]
        within = (q.used_by(project) + request).within(limits[project].nominal)
        why = fits(project, request, q)
        if within:
            assert why is None
        if why is None:
            q = admit_with(q, project, request)
            used = q.used_by(project)
            cap = limits[project].borrow_limit("cpu")
            if cap is not None:
                assert used.cpu - limits[project].nominal.cpu <= max(cap, 0) or within
            for r in RESOURCES:
                if used.get(r) > limits[project].nominal.get(r) and request.get(r):
                    # Borrowing never takes the site above the cohort's nominal total.
                    assert sum(q.used_by(p).get(r) for p in names) <= sum(
                        lim.nominal.get(r) for lim in limits.values()
                    )
