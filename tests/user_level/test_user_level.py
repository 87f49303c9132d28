"""Ghazi et al. (ICML 2023) user-level mechanisms: reference values, exact laws, exact privacy audit."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.accounting import user_level as acc
from dpjax.user_level import audit, mechanisms as M, phased, problems as P, tdlap

# --- spec §3.5 reference values (computed from the formulas; tolerance 1e-3 relative) -----------------------
NOISE_TABLE = [  # n, ln P_128 + ln(1/beta), Delta mu sqrt(m)/G, sigma_A2 mu sqrt(m)/G, sigma_B1 mu/G, m*
    (300, 212.67, 0.42641, 1237.32, 0.035325, 1.227e9),
    (1000, 390.82, 0.11349, 329.31, 0.010598, 9.656e8),
    (10000, 695.52, 0.01336, 38.763, 0.0010598, 1.338e9),
    (100000, 993.29, 0.00158, 4.5785, 0.00010598, 1.867e9),
]


@pytest.mark.parametrize("row", NOISE_TABLE)
def test_noise_reference_table(row):
    n, logs, delta_ratio, sigma_ratio, b1, mstar = row
    assert acc.log_pair_count(n, 128) + math.log(100) == pytest.approx(logs, rel=1e-3)
    assert acc.deletion_sensitivity_bound(n, 1, 128, 0.01, 1.0, 1.0, 1) == pytest.approx(delta_ratio, rel=2e-3)
    assert acc.noise_multiplier(1, 1e-6, 0.01, n, 1, 1) / n == pytest.approx(sigma_ratio, rel=1e-3)
    assert acc.b1_sigma(1, 1e-6, n, 1.0, 1.0) == pytest.approx(b1, rel=1e-3)
    assert acc.crossover_m(1, 1e-6, 0.01, n) == pytest.approx(mstar, rel=2e-3)


def test_phased_sco_and_min_users_reference():
    sizes = [hi - lo for lo, hi in acc.phased_sco_groups(10**4, 1, 1, 1e-6, "A4")]
    # spec: 5000, 2500, 1250, 625, 312 (n/2^i rounded; the half-open integer ranges give 313 for the last)
    assert np.allclose(sizes, [5000, 2500, 1250, 625, 312], atol=1) and sum(sizes) <= 10**4
    assert len(acc.phased_sco_groups(10**3, 1, 1, 1e-6, "A4")) == 1
    assert len(acc.phased_sco_groups(10**5, 1, 1, 1e-6, "A4")) == 8
    groups = acc.phased_sco_groups(10**5, 100, 1, 1e-6, "A4b")
    assert len(groups) == 24 and all(b == c for (_, b), (c, _) in zip(groups, groups[1:]))  # disjoint, contiguous
    assert acc.min_users("A2", 1, 1e-6) == 258 and acc.min_users("A4", 1, 1e-6) == 516
    assert acc.min_users("A3", 1, 1e-6, m=100) == 5754
    with pytest.raises(ValueError, match="n=1000"):
        acc.privacy("A3", 1, 1e-6, n=1000, m=1000)


def test_privacy_specs_compose_and_rate_shape_is_not_private():
    p = acc.privacy("A3", 1.0, 1e-6, n=10**4, m=100)
    assert len(p.calls) == 20 and p.epsilon(1e-6).epsilon == pytest.approx(1.0) and p.unit == "user"
    cal = p.calibrate(0.5, 1e-6)
    assert acc.privacy("A3", cal["epsilon"], cal["delta"], n=10**5, m=100).certified()[0] <= 0.5
    sco = acc.privacy("A4", 1.0, 1e-6, n=10**4, m=1)  # parallel composition: 5 disjoint groups at (eps, delta)
    assert len(sco.calls) == 5 and sco.certified() == pytest.approx((1.0, 1e-6))
    a6 = acc.privacy("A6", 1.0, 1e-6, n=10**6, m=100)
    assert a6.certified() == pytest.approx((0.5, 5e-7))  # split halves: disjoint users
    assert acc.privacy("A6", 1.0, 1e-6, n=10**6, m=100, split_users=False).certified() == pytest.approx((1.0, 1e-6))
    for spec in (acc.privacy("A3", 1, 1e-6, n=10, m=1, mode="rate-shape"), acc.privacy("B2", 1, 1e-6, n=10, m=1)):
        rep = spec.epsilon(1e-6)
        assert not spec.private and math.isinf(rep.epsilon) and "NOT private" in rep.notes[0]
        with pytest.raises(ValueError, match="not private"):
            spec.calibrate(1.0, 1e-6)
    with pytest.raises(ValueError, match="delta"):
        p.epsilon(1e-8)


def test_privacy_certifies_what_the_run_releases():
    """Issue 23: certified mode says where no release can happen (the exact fallback of some call is infeasible,
    decided from n and kappa alone); the superseded stop is its own mode and NOT private."""
    a2c = acc.privacy("A2c", 1.0, 1e-5, n=300, m=4096)
    assert a2c.private and not a2c.releasable and a2c.certified() == pytest.approx((1.0, 1e-5))
    assert "refuses before reading the data" in a2c.epsilon(1e-5).notes[-1]
    assert acc.privacy("B1", 1.0, 1e-5, n=300, m=4096).releasable
    for mech in ("A2", "A2c", "A3", "A5", "A6"):
        stop = acc.privacy(mech, 1.0, 1e-6, n=10**6, m=100, mode="certificate-stop")
        rep = stop.epsilon(1e-6)
        assert not stop.private and math.isinf(rep.epsilon) and "data" in rep.notes[0] and "NOT private" in rep.notes[0]
        with pytest.raises(ValueError, match="not private"):
            stop.calibrate(1.0, 1e-6)
    with pytest.raises(ValueError, match="certificate-stop"):
        acc.privacy("B1", 1.0, 1e-6, n=300, m=1, mode="certificate-stop")
    assert acc.exact_feasible(14, 3) and not acc.exact_feasible(21, 3) and not acc.exact_feasible(20, 6)


# --- D1: Lemma 3.8 exact hypergeometric tails --------------------------------------------------------------
@pytest.mark.parametrize("beta,expected", [(0.1, 1.17e-15), (0.01, 8.37e-30)])
def test_lemma38_exact_tail(beta, expected):
    assert audit.lemma38_pm_tail(20000, 2000, beta) == pytest.approx(expected, rel=5e-3)


def test_lemma38_sphere_family_statistical():
    # S1: 2000 permutations; tail <= beta + 3 binomial standard deviations (sqrt(beta(1-beta)/k))
    vecs = P.zero_sum_family("sphere", 400, 3, 1.0, seed=0)
    rng = np.random.default_rng(1)
    m, beta, k = 40, 0.05, 2000
    sums = np.array([np.linalg.norm(vecs[rng.permutation(400)[:m]].sum(0)) for _ in range(k)])
    frac = np.mean(sums > 5 * math.sqrt(m * math.log(1 / beta)))
    assert frac <= beta + 3 * math.sqrt(beta * (1 - beta) / k)


# --- A0: TDLap law --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("eps,delta", [(1, 1e-5), (1, 1e-6), (0.5, 1e-6), (1, 1e-9)])
def test_tdlap_quantised_law_exact(eps, delta):
    p = acc.user_level_params(eps, delta)
    masses = tdlap.sampler_masses(p.eps_prime, p.kappa)
    assert len(masses) == 2 * p.kappa + 1 and sum(masses) == 2**64 and masses == masses[::-1]
    assert max(range(len(masses)), key=masses.__getitem__) == p.kappa  # centred (shifted) at kappa
    assert masses[0] / 2**64 <= p.delta_prime  # p(0) = p(2 kappa) <= delta'
    assert tdlap.sampler_log_ratio(p.eps_prime, p.kappa) <= p.eps_prime + 1e-9  # quantisation: < 2^-64 per atom
    assert np.allclose(tdlap.sampler_pmf(p.eps_prime, p.kappa), acc.tdlap_pmf(p.eps_prime, p.kappa), rtol=1e-9)


def test_tdlap_inverse_cdf_exact_at_every_threshold():
    eps, kappa = 0.5, 4
    th = tdlap._thresholds(eps, kappa)
    cum = np.cumsum(np.array(tdlap.sampler_masses(eps, kappa), dtype=object))[:-1]
    for k, c in enumerate(cum, start=1):
        for value, expect in ((int(c), k), (int(c) - 1, k - 1)):
            r = tdlap.tdlap_from_bits(np.uint32(value >> 32), np.uint32(value & 0xFFFFFFFF), th)
            assert int(r) == expect
    assert int(tdlap.tdlap_from_bits(np.uint32(2**32 - 1), np.uint32(2**32 - 1), th)) == 2 * kappa
    assert int(tdlap.tdlap_from_bits(np.uint32(0), np.uint32(0), th)) == 0
    draws = [int(tdlap.tdlap_sample(jax.random.key(s), eps, kappa)) for s in range(3)]
    assert draws == [int(tdlap.tdlap_sample(jax.random.key(s), eps, kappa)) for s in range(3)]  # keyed


# --- A1 exact: bottom, accuracy path, Observation 3.5, exhaustive privacy audit (D9) --------------------------
_clipped_mean_table = audit.clipped_mean_table


def test_stable_table_robust_sensitivity_matches_brute_force():
    """Delta_{4 kappa - |S|} f(x_{-S}) (Definition 3.2) from the vectorised bitmask tables equals the direct
    maximum over U superset of S, |U| <= 4 kappa, i not in U of |f(x_{-U}) - f(x_{-U-{i}})| (f = clipped mean)."""
    vals = np.random.default_rng(7).uniform(size=7)
    kappa, n = 1, 7
    table = _clipped_mean_table(vals, kappa, 0.05)
    f = lambda keep: vals[list(keep)].mean() if keep else 0.0  # noqa: E731  (f(empty) = proj_K(0) = 0)
    for s_mask, got in table.robust.items():
        s_set = {i for i in range(n) if s_mask >> i & 1}
        want = 0.0
        for size in range(len(s_set), 4 * kappa + 1):
            for u in itertools.combinations(range(n), size):
                if not s_set <= set(u):
                    continue
                keep = [i for i in range(n) if i not in u]
                want = max([want] + [abs(f(keep) - f([k for k in keep if k != i])) for i in keep])
        assert got == pytest.approx(want, abs=1e-12)


def test_a1_bottom_when_unstable_and_accuracy_path_when_stable():
    vals = np.random.default_rng(0).uniform(size=10)
    params = acc.a1_test_params(0.5, 2, 1e-4, 0.05)
    unstable = _clipped_mean_table(vals, 2, 1e-4)
    assert unstable.bottom.all()
    assert all(M.del_output_pert(jax.random.key(s), unstable, params)[0] == M.BOTTOM for s in range(5))
    stable = _clipped_mean_table(vals, 2, 10.0)  # Delta_{4 kappa} f(x) <= Delta: S = {} for every R1 (U4)
    assert all(s == () for s in stable.selected)
    status, out = M.del_output_pert(jax.random.key(3), stable, acc.a1_test_params(0.5, 2, 10.0, 0.05))
    assert status == M.OK and abs(out[0] - vals.mean()) < 0.05 * 6


def test_observation_3_5_monotonicity():
    rng = np.random.default_rng(2)
    for _ in range(3):
        vals = rng.uniform(size=9)
        other = vals.copy()
        other[rng.integers(9)] = rng.uniform()
        t, t2 = _clipped_mean_table(vals, 2, 0.08), _clipped_mean_table(other, 2, 0.08)
        for r1 in range(4):  # X^{r1}_stable(x') nonempty => X^{r1+1}_stable(x) nonempty
            assert t2.bottom[r1] or not t.bottom[r1 + 1]
            assert t.bottom[r1] or not t2.bottom[r1 + 1]


def test_exact_privacy_audit_d9():
    """U5 at non-vacuous parameters (those of D9 and ``dpjax audit user-level``): certified delta well below 1,
    release probability well above 0; exact H_{e^{2 eps'}} <= p(0) + p(2 kappa) + e^{eps'} delta_G in both
    directions, and the mutant that skips the stability test violates it."""
    eps_p, kappa, n, sens = 1.0, 3, 14, 1e-4
    sigma = 8 * kappa * sens / 0.25
    eps_c, certified_delta = acc.a1_certified(acc.a1_test_params(eps_p, kappa, sens, sigma))
    assert eps_c == 2 * eps_p and certified_delta < 0.05  # p(0) + p(6) = 0.0473 at eps' = 1, kappa = 3
    rng = np.random.default_rng(5)
    spread = rng.uniform(0.3, 0.7, size=n)
    pairs = [audit.canary_pair(n, 2), audit.canary_pair(n, 0), (spread, np.where(np.arange(n) == 0, 1.0, spread))]
    for j, (x, x2) in enumerate(pairs):
        lp, lq = (audit.output_law(_clipped_mean_table(v, kappa, sens), eps_p, kappa) for v in (x, x2))
        honest = max(audit.hockey_stick(lp, lq, sigma, math.exp(eps_c)), audit.hockey_stick(lq, lp, sigma, math.exp(eps_c)))
        assert honest <= certified_delta
        if j < 2:  # canary pairs: both datasets release with probability > 0.7 (not vacuous)
            assert min(lp[1].sum(), lq[1].sum()) > 0.7
            sp, sq = audit.skip_test_law(x), audit.skip_test_law(x2)
            assert audit.hockey_stick(sq, sp, sigma, math.exp(eps_c)) > certified_delta  # mutant caught
    # the bottom step is nearly tight on the 2-outlier canary: P(R1 < 2) vs P(R1 < 3), exact eps ~ eps' (<= 2 eps')
    lp, lq = (audit.output_law(_clipped_mean_table(v, kappa, sens), eps_p, kappa) for v in pairs[0])
    assert 0.8 < audit.exact_epsilon(lp, lq, sigma, certified_delta) <= eps_p


# --- A2c: what a user receives when the certificate fails (issue 23) ------------------------------------------
def _released_law(run, eps_p, kappa, sigma, max_keys=400):
    """Exact output law of a keyed user-level release (``run(key) -> Release``) whose randomness is Algorithm 1's
    ``key_r1, key_noise = split(key)``: for two keys per value r1 of R1 the outcome -- an atom (``bottom``,
    ``not-releasable``, or the refusal message) or the release centre ``theta - sigma z`` (z: the key's noise
    draw) -- must agree (the outcome is a function of R1 alone: checked), and the law is
    sum_r1 pmf(r1) delta_outcome(r1), pmf the sampler's exact law. Returns ``(atoms, weights, centres)``."""
    pmf = tdlap.sampler_pmf(eps_p, kappa)
    seen: dict = {}
    for s in range(max_keys):
        key = jax.random.key(s)
        key_r1, key_noise = jax.random.split(key)
        r1 = int(tdlap.tdlap_sample(key_r1, eps_p, kappa))
        if len(seen.setdefault(r1, [])) == 2:
            continue
        try:
            rel = run(key)
        except ValueError as exc:  # a refusal: an atom too (its message must not depend on the data)
            outcome = ("refused: " + str(exc),)
        else:
            if rel.status == M.OK:
                with jax.enable_x64(True):
                    z = float(jax.random.normal(key_noise, (1,), jnp.float64)[0])
                outcome = ("release", round(float(rel.theta[0]) - sigma * z, 10))
            else:
                outcome = (rel.status_name,)
        seen[r1].append(outcome)
        if len(seen) == 2 * kappa + 1 and all(len(o) == 2 for o in seen.values()):
            break
    assert sorted(seen) == list(range(2 * kappa + 1)) and all(len(o) == 2 for o in seen.values())
    assert all(o[0] == o[1] for o in seen.values()), seen
    atoms, release = {}, {}
    for r1, (outcome, _) in seen.items():
        table = release if outcome[0] == "release" else atoms
        label = outcome[1] if outcome[0] == "release" else outcome[0]
        table[label] = table.get(label, 0.0) + float(pmf[r1])
    return atoms, np.array(list(release.values())), np.array(list(release.keys()))


def _worst_hockey_stick(law_p, law_q, sigma, alpha):
    """max over both directions of H_alpha = sum_atoms max(0, P(a) - alpha Q(a)) + int max(0, p - alpha q)."""
    def one(a, b):
        atoms = sum(max(0.0, pa - alpha * b[0].get(k, 0.0)) for k, pa in a[0].items())
        return atoms + audit.hockey_stick((0.0, a[1], a[2]), (0.0, b[1], b[2]), sigma, alpha)
    return max(one(law_p, law_q), one(law_q, law_p))


def test_a2c_data_dependent_stop_is_caught_by_the_exact_audit():
    """Issue 23, item 1: a stop on a failed certificate is a privacy violation; the certified path is private.

    Test-mode Algorithm 1 (eps' = 1, kappa = 3, Delta = 1e-4, sigma = 8 kappa Delta/0.25: certified
    (2, 0.047)), f = mean on K = B(0, 1). D: every user at 0.5 (gamma = 0, the certificate passes); D': the
    canary user at 1 (gamma ~ 0.5, it fails). Output laws are computed exactly from the mechanism itself
    (``_released_law``) and compared by the hockey-stick divergence at the certified epsilon.
    * n = 21 > 20 users (no exact fallback): the default refuses on both datasets with one message (H = 0);
      the superseded stop (``fallback='stop'``) releases N(0.5, sigma^2) on D and stops with probability 1
      on D' -- H = 1 > certified delta, caught. Before issue 23 the default WAS that stop.
    * n = 14 (fallback feasible): D releases through the certificate, D' through the exact stable set (bottom
      when R1 = 0, else the canary deleted): H = p(0) <= certified delta, and the certificate's release equals
      the exact enumeration's for the same key."""
    eps_p, kappa, sens = 1.0, 3, 1e-4
    sigma = 8 * kappa * sens / 0.25
    params = acc.a1_test_params(eps_p, kappa, sens, sigma)
    eps_c, delta_c = acc.a1_certified(params)
    alpha = math.exp(eps_c)
    loss, dom = P.Loss("mean"), M.Domain.ball(1.0, 1)

    def datasets(n):
        out = []
        for canary in (0.5, 1.0):
            values = np.full(n, 0.5)
            values[0] = canary
            out.append((values[:, None, None], np.zeros((n, 1))))
        return out

    def laws(n, **kw):
        return [_released_law(lambda key: M.output_perturbation(key, loss, x, y, dom, params, **kw), eps_p, kappa,
                              sigma) for x, y in datasets(n)]

    for n in (14, 21):
        passed = [M.certificate(loss, x, y, dom, M.minimiser(loss, x, y, dom), 4 * kappa, sens).passed
                  for x, y in datasets(n)]
        assert passed == [True, False]
    default21 = laws(21)
    assert _worst_hockey_stick(*default21, sigma, alpha) <= delta_c  # fails on the stop of the superseded spec
    (atoms_d, weights_d, _), (atoms_d2, _, _) = default21  # one refusal atom, the same message on D and D'
    assert atoms_d == atoms_d2 and len(atoms_d) == 1 and weights_d.size == 0
    assert next(iter(atoms_d)).startswith("refused: n=21, kappa=3")
    stop = laws(21, fallback="stop")
    assert stop[0][0] == {} and stop[1][0] == {"not-releasable": pytest.approx(1.0)}
    h_stop = _worst_hockey_stick(*stop, sigma, alpha)
    assert h_stop == pytest.approx(1.0) and h_stop > delta_c  # the violation is caught
    assert not acc.privacy("A2c", 1.0, 1e-6, n=300, m=1, mode="certificate-stop").private

    feasible = laws(14)
    h = _worst_hockey_stick(*feasible, sigma, alpha)
    p0 = float(tdlap.sampler_pmf(eps_p, kappa)[0])
    assert feasible[0][0] == {} and feasible[1][0] == {"bottom": pytest.approx(p0)}
    assert h == pytest.approx(p0, rel=1e-6) and h <= delta_c
    (x, y), _ = datasets(14)
    table = M.stable_table(M.oracle(loss, x, y, dom), 14, kappa, sens)
    for s in range(3):
        rel = M.output_perturbation(jax.random.key(s), loss, x, y, dom, params)
        assert rel.path == "certificate" and rel.private
        assert np.allclose(rel.theta, M.del_output_pert(jax.random.key(s), table, params)[1], rtol=0, atol=1e-12)


# --- A2 / A2c / B1 ---------------------------------------------------------------------------------------------
def test_certificate_never_passes_above_exact_deletion_sensitivity():
    """U8: on tiny instances, certificate passed => exact Delta_{4 kappa} theta*(x) <= Delta and S = {} always."""
    kappa, n = 2, 12
    passed = 0
    for seed, sens in [(0, 0.02), (1, 0.1), (2, 0.5), (3, 3.0)]:
        x, y = P.exchangeable("mean", n, 30, 2, seed)
        dom = M.Domain.ball(1.0, 2)
        theta = M.minimiser(P.Loss("mean"), x, y, dom)
        cert = M.certificate(P.Loss("mean"), x, y, dom, theta, 4 * kappa, sens)
        table = M.stable_table(M.oracle(P.Loss("mean"), x, y, dom), n, kappa, sens)
        if cert.passed:
            passed += 1
            assert table.robust[0] <= sens and all(s == () for s in table.selected)
        assert cert.bound >= table.robust[0] - 1e-12  # Lemma C.1 upper-bounds the exact robust sensitivity
    assert passed >= 1


def test_lemma_c1_deterministic_bound():
    """U7: ||theta*(x) - theta*(x_{-S})|| <= |S| gamma/(mu (n - |S|)) + 2 tau for random S (mean estimation)."""
    x, y = P.exchangeable("mean", 200, 50, 5, 0)
    loss, dom = P.Loss("mean"), M.Domain.ball(10.0, 5)
    theta = M.minimiser(loss, x, y, dom)
    cert = M.certificate(loss, x, y, dom, theta, 1, 1.0)
    gamma = cert.gamma
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(200):
        s = rng.integers(1, 20)
        w = np.ones(200)
        w[rng.choice(200, s, replace=False)] = 0
        dist = np.linalg.norm(theta - M.minimiser(loss, x, y, dom, w))
        worst = max(worst, dist / (s * gamma / (200 - s)))
        # U6: closed form (n xbar - sum_{S} xbar_i)/(n - |S|)
        assert np.allclose(M.minimiser(loss, x, y, dom, w), x[w > 0].mean(axis=(0, 1)), atol=1e-10)
    assert worst <= 1.0


def test_noise_vanishes_to_the_non_private_minimiser_and_determinism():
    """Infinite budget (sigma -> 0) leaves theta*; the same key gives the same output bit for bit."""
    x, y = P.exchangeable("logistic", 300, 20, 3, 0)
    loss, dom = P.Loss("logistic", ridge=0.5), M.Domain.ball(1.0, 3)
    outs = []
    for sigma in (1.0, 1e-3):
        params = M.acc.A1Params(0.5, 1e-7, 2, 10.0, sigma)
        # n = 300 has no feasible exact fallback: the private default refuses, the diagnostic runs (not private)
        with pytest.raises(ValueError, match="n=300, kappa=2.*refused before reading the data"):
            M.output_perturbation(jax.random.key(7), loss, x, y, dom, params, "certificate")
        rel = M.output_perturbation(jax.random.key(7), loss, x, y, dom, params, "certificate", fallback="stop")
        assert rel.status == M.OK and rel.path == "certificate" and not rel.private
        outs.append((rel.theta - rel.minimiser) / sigma)
    assert np.allclose(outs[0], outs[1], rtol=0, atol=1e-10)  # theta* + sigma z with the same z: float64 rounding only
    b1 = M.replace_output_pert(jax.random.key(1), loss, x, y, dom, 0.9, 1e-6)
    assert np.array_equal(b1.theta, M.replace_output_pert(jax.random.key(1), loss, x, y, dom, 0.9, 1e-6).theta)
    perm = np.random.default_rng(0).permutation(300)  # U9: user order does not change the oracle
    assert np.allclose(M.minimiser(loss, x[perm], y[perm], dom), rel.minimiser, atol=1e-9)


def test_certified_a2c_refuses_before_reading_the_data_where_the_exact_fallback_is_infeasible():
    """A2c at n = 300 (kappa = 28): the exact fallback is infeasible, so the private mechanism refuses with the
    same message for every dataset -- NaN data included (nothing is read) -- and privacy() says it cannot
    release. The superseded stop (fallback='stop') still answers NOT_RELEASABLE on heterogeneous users, marked
    not private. gamma <= ~1 (user means lie in the unit ball); gamma_target = 10 sqrt((ln n + ln 100)/m) < 1
    needs m > ~4000."""
    x, y = P.exchangeable("mean", 300, 4000, 2, 0, heterogeneous=3.0)
    loss, dom = P.Loss("mean"), M.Domain.ball(1.0, 2)
    messages = set()
    for data in (x, np.full_like(x, np.nan)):
        with pytest.raises(ValueError, match="n=300, kappa=28") as err:
            M.sc_output_pert_certified(jax.random.key(0), loss, data, y, dom, 1.0, 1e-5, 0.01)
        messages.add(str(err.value))
    assert len(messages) == 1
    assert not acc.privacy("A2c", 1.0, 1e-5, n=300, m=4000).releasable
    rel = M.sc_output_pert_certified(jax.random.key(0), loss, x, y, dom, 1.0, 1e-5, 0.01, fallback="stop")
    assert rel.status == M.NOT_RELEASABLE and np.isnan(rel.theta).all() and not rel.certificate.passed
    assert not rel.private


def test_phased_structure_and_rate_shape():
    x, y = P.exchangeable("mean", 64, 8, 2, 0)
    loss, dom = P.Loss("mean"), M.Domain.ball(1.0, 2)
    assert phased.num_phases(64, 8) == 9 and np.allclose(phased.phase_lambdas(0.5, 3), [2, 8, 32])
    a = phased.phased_erm(jax.random.key(0), loss, x, y, dom, 1, 1e-6, 0.01, mode="rate-shape")
    b = phased.phased_erm(jax.random.key(0), loss, x, y, dom, 1, 1e-6, 0.01, mode="rate-shape")
    assert np.array_equal(a.theta, b.theta) and "not private" in a.variant
    sco = phased.phased_sco(jax.random.key(0), loss, x, y, dom, 1, 1e-6, 0.01, variant="A4", mode="rate-shape",
                            min_group=8)
    assert np.isfinite(sco.theta).all()


@pytest.mark.slow  # ~5-15 s, mostly matplotlib
def test_noise_figure_quick_and_refuses_other_runs(tmp_path):
    from dpjax import reproduce

    fig = reproduce.get("user-level-noise")
    report = fig.fn(tmp_path, quick=True, seed=0)
    text = report.read_text()
    assert "(6/6 hold)" in text and (tmp_path / "results.csv").exists() and (tmp_path / "user-level-noise.png").exists()
    with pytest.raises(ValueError, match="another run"):
        fig.fn(tmp_path, quick=False, seed=0)


def test_input_validation_names_the_argument():
    with pytest.raises(ValueError, match="n=20"):
        acc.deletion_sensitivity_bound(20, 10, 128, 0.01, 1.0, 1.0)
    with pytest.raises(ValueError, match="kind"):
        P.Loss("huber")
    with pytest.raises(ValueError, match="mode"):
        acc.privacy("A2", 1.0, 1e-6, n=300, m=1, mode="fast")
    with pytest.raises(ValueError, match="n=40"):
        M.stable_table(lambda w: w[:1], 40, 2, 0.1)


def test_certified_phased_erm_stops_instead_of_substituting():
    """A3 with A2c inside (eps = 1, delta = 1e-6, n = 6000 >= n_min = 5754 at m = 16). Certified mode refuses
    before the first phase (no phase's exact fallback is feasible). The NOT private diagnostic
    mode='certificate-stop': early phases pass the certificate; once lambda_i = lambda 4^i pushes the target
    Delta below float64 resolution (Delta_C ~ 1e-13 vs the 2 tau rounding allowance) the run stops as not
    releasable -- never bottom, never a baseline."""
    x, y = P.exchangeable("mean", 6000, 16, 3, 0)
    with pytest.raises(ValueError, match="n=6000.*refused before reading the data"):
        phased.phased_erm(jax.random.key(0), P.Loss("mean"), np.full_like(x, np.nan), y, M.Domain.ball(1.0, 3),
                          1.0, 1e-6, 0.01)
    res = phased.phased_erm(jax.random.key(0), P.Loss("mean"), x, y, M.Domain.ball(1.0, 3), 1.0, 1e-6, 0.01,
                            mode="certificate-stop")
    assert res.status == M.NOT_RELEASABLE and np.isnan(res.theta).all()
    assert not any(p.private for p in res.phases)
    assert all(p.certificate.passed for p in res.phases[:-1]) and not res.phases[-1].certificate.passed
    assert len(res.phases) >= 5 and res.phases[-1].certificate.target < 1e-12


def test_phased_without_noise_is_key_independent_and_reaches_the_minimiser():
    """rho = 0 (infinite budget): M' is the noise-free localisation -- the same for every key, and for mean
    estimation it reaches the ERM minimiser (the mean): phase i multiplies the gap by lambda_i/(1 + lambda_i) <= 1,
    the first by 4e-3/(1 + 4e-3) < 1e-2."""
    x, y = P.exchangeable("mean", 40, 8, 2, 3)
    dom = M.Domain.ball(1.0, 2)
    runs = [phased.phased_erm(jax.random.key(s), P.Loss("mean"), x, y, dom, 1, 1e-6, 0.01, mode="rate-shape",
                              rho=0.0, lam=1e-3).theta for s in (0, 1)]
    assert np.array_equal(runs[0], runs[1])
    assert np.linalg.norm(runs[0] - x.reshape(-1, 2).mean(0)) <= 1e-2 * np.linalg.norm(x.reshape(-1, 2).mean(0)) + 1e-12


def test_d5_huber_reference_is_the_minimiser_the_solver_reaches():
    """D5's reference (float64 IRLS for the Huber loss, the D5 loss itself) is a stationary point of the convex
    Huber loss (gradient ~ float64 rounding), and the compiled accelerated solver (no ridge, K = B(0, 1) not active:
    the minimiser has norm ~ 1/2) reaches the same minimum: for an L = 1/w smooth convex loss the first-order
    optimality gap after t accelerated steps is O(L D^2 / t^2), here 10 * 4 / 2000^2 = 1e-5 at most, and the
    IRLS point cannot be beaten (convexity + zero gradient)."""
    from dpjax.reproduce import user_level as U
    from dpjax.user_level import solver

    loss = P.Loss("absolute", radius=1.0, smoothing=U.rates.D5_HUBER_WIDTH)
    x, y = P.exchangeable("absolute", 30, 4, 3, 5, noise=0.1)
    ref, best, gnorm = U.rates.huber_reference(loss, x, y)
    assert gnorm < 1e-10 and np.linalg.norm(ref) < 1.0
    dom = M.Domain.ball(1.0, 3)
    with jax.enable_x64(True):
        sol = np.asarray(solver.argmin(loss, np.asarray(x), np.asarray(y), np.ones(30), 0.0, np.zeros(3),
                                       np.asarray(dom.centers), np.asarray(dom.radii), iters=2000))
    gap = U.rates.huber_loss(loss, sol, x, y) - best
    assert -1e-12 <= gap <= 1e-5


def test_convex_rate_instance_curvature_lipschitz_and_minimiser():
    """D5's tied-curvature instance: the mean loss (mu/2)||theta - x||^2 has Hessian mu I with mu = Phased-ERM's
    lambda of the cell (Theorem 4.1), every gradient on K = B(0, r) has norm <= G (the worst theta on K is
    -r x/||x||, giving mu (r + ||x||) <= mu (r + B) = G), and the minimiser is the item mean (checked against a
    numeric BFGS solve of the same objective; BFGS on a quadratic stops at gradient norm 1e-10, so its point is
    within 1e-10/mu of the minimiser in units where mu = 1)."""
    from scipy.optimize import minimize

    n, m, d, r, g = 30, 8, 4, 1.0, 2.0
    x, chi, mu, big_b = P.convex_rate_instance(n, m, d, 3, rho=1.0, radius=r, lipschitz=g)
    assert mu == phased.erm_lambda(g, 2 * r, n, m, d, 1.0) and mu * (r + big_b) == pytest.approx(g, rel=1e-12)
    assert np.linalg.norm(chi) == pytest.approx(r / 2) and np.linalg.norm(x, axis=-1).max() <= big_b
    loss = P.Loss("squared", radius=r, zeta=mu / 2)
    items = x.reshape(-1, d)
    theta, h = np.array([0.3, -0.2, 0.1, 0.0]), 1e-3
    hess = np.stack([(np.mean(loss.grad(theta + h * e, items, None, np), 0)
                      - np.mean(loss.grad(theta - h * e, items, None, np), 0)) / (2 * h) for e in np.eye(d)])
    np.testing.assert_allclose(hess, mu * np.eye(d), rtol=1e-9, atol=1e-12 * mu)
    worst = -r * items / np.linalg.norm(items, axis=1, keepdims=True)
    assert np.linalg.norm(loss.grad(worst[:, None, :], items[:, None, :], None, np)[:, 0], axis=1).max() <= g
    x_bar = items.mean(0)
    assert np.linalg.norm(x_bar) < r  # so the minimiser over K is the unconstrained one
    sol = minimize(lambda t: np.mean(loss.value(t, items, None, np)) / mu, np.zeros(d),
                   jac=lambda t: np.mean(loss.grad(t, items, None, np), 0) / mu, method="BFGS", tol=1e-12)
    np.testing.assert_allclose(sol.x, x_bar, atol=1e-8)
    with pytest.raises(ValueError, match="rho=50"):
        P.convex_rate_instance(2, 1, 4, 0, rho=50.0)


def test_tied_curvature_closed_form_matches_unprojected_m_prime():
    """The closed-form expectation D5 compares with (M' on the isotropic quadratic without projections) equals
    the Monte Carlo mean of M' when K is so large that no projection acts; tolerance 4 standard errors of the
    mean of 4000 runs (a false failure has probability ~6e-5; the keys are fixed, so the test is deterministic)."""
    from dpjax.reproduce import user_level as U

    n, m, d = 20, 4, 3
    x, _, mu, _ = P.convex_rate_instance(n, m, d, 1)
    loss, dom = P.Loss("squared", radius=1e6, zeta=mu / 2), M.Domain.ball(1e6, d)
    t = phased.num_phases(n, m)
    lams = phased.phase_lambdas(mu, t)
    sig = 2.0 / (lams * n * math.sqrt(m))
    outs = phased.rate_shape_many(jax.random.split(jax.random.key(0), 4000), loss, x, np.zeros((n, m)), dom,
                                  np.ones((t, n)), lams, sig)
    x_bar = x.reshape(-1, d).mean(0)
    exc = 0.5 * mu * np.sum((outs - x_bar) ** 2, axis=1)
    pred = U.rates.tied_excess_closed_form(mu, lams, sig, d, float(np.linalg.norm(x_bar)))
    assert abs(exc.mean() - pred) <= 4 * exc.std(ddof=1) / math.sqrt(len(exc))


@pytest.mark.parametrize("variant", ["A4", "A4b"])
def test_phased_sco_group_stacking_equals_masking_all_users(variant):
    """Rate-shape Phased-SCO runs phase i on its own group only (users stacked per group); that is the same
    objective as the full data with the other users masked to weight 0, so the outputs agree up to float64
    reassociation (the solver contracts, so rounding does not grow: 1e-10 is ~1e5 ulps of headroom)."""
    n, m, d, n0 = 64, 4, 3, 8
    x, y = P.exchangeable("absolute", n, m, d, 2)
    loss, dom = P.Loss("absolute", radius=1.0, smoothing=1e-2), M.Domain.ball(1.0, d)
    key = jax.random.key(5)
    out = phased.phased_sco(key, loss, x, y, dom, 1.0, 1e-6, 1 / (n * m), variant=variant, mode="rate-shape",
                            min_group=n0)
    groups = phased._groups(n, m, 1.0, 1e-6, variant, n0)
    t = len(groups)
    lam = phased.sco_lambda(loss.lipschitz, dom.diameter, n, m, d, 1.0, t if variant == "A4b" else 1)
    lams = phased.phase_lambdas(lam, t)
    masks = np.zeros((t, n))
    for i, (lo, hi) in enumerate(groups):
        masks[i, lo:hi] = 1.0
    sig = 2 * loss.lipschitz / (lams * np.array([hi - lo for lo, hi in groups]) * math.sqrt(m))
    masked = phased.rate_shape_many(key[None], loss, x, y, dom, masks, lams, sig)[0]
    np.testing.assert_allclose(out.theta, masked, rtol=0, atol=1e-10)
    assert np.linalg.norm(out.theta - masked) < 1e-10 < np.linalg.norm(out.theta)


@pytest.mark.parametrize("kind", ["logistic", "hinge", "absolute"])
def test_solver_gradient_closed_form_equals_per_item_gradients(kind):
    """The solver's linear-model gradient contracts the margin coefficients with the data
    (``weighted_mean_grad``, ``user_mean_grads``); it must equal the mean of the per-item gradients
    ``Loss.grad`` (float64, so equal to ~1e-15), with unequal user weights, a zero weight and a ridge, and
    under a vmap over thetas (the batched form D5 runs)."""
    from dpjax.user_level import solver

    n, m, d = 7, 5, 4
    x, y = P.exchangeable(kind, n, m, d, 3)
    loss = P.Loss(kind, radius=1.0, ridge=0.3, smoothing=0.2)
    weights = np.array([1.0, 0.0, 2.0, 0.5, 1.0, 3.0, 1.0])
    thetas = np.random.default_rng(0).normal(size=(3, d)) * 0.8
    per_user = np.stack([[np.mean(loss.grad(th, x[i], y[i], np), axis=0) for i in range(n)] for th in thetas])
    expect = np.einsum("u,tud->td", weights, per_user) / weights.sum()
    with jax.enable_x64(True):
        xj, yj, wj = (jnp.asarray(a, jnp.float64) for a in (x, y, weights))
        got_users = np.stack([np.asarray(solver.user_mean_grads(loss, jnp.asarray(th), xj, yj)) for th in thetas])
        got = np.asarray(jax.vmap(lambda th: solver.weighted_mean_grad(loss, th, xj, yj, wj))(jnp.asarray(thetas)))
    np.testing.assert_allclose(got_users, per_user, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got, expect, rtol=1e-12, atol=1e-14)
    assert np.min(np.abs(expect)) > 1e-6  # the comparison is not between zeros


def test_phased_erm_lanes_with_their_own_schedules_equal_separate_runs():
    """D5 runs a cell's rho = 1 runs, its rho = 1e-4 floor and its B1-noise runs as lanes of one program with
    per-lane (lambda, sigma) schedules; each lane must equal the run with that schedule alone (float64, to
    round-off), and the lanes must differ (the schedules reach the computation)."""
    from dpjax.reproduce.user_level.rates import phased_erm_runs

    n, m, d = 12, 4, 3
    x, y = P.exchangeable("absolute", n, m, d, 4)
    loss, dom = P.Loss("absolute", radius=1.0, smoothing=0.1), M.Domain.ball(1.0, d)
    keys = jax.random.split(jax.random.key(2), 3)
    lanes = phased_erm_runs(loss, x, y, dom, jnp.concatenate([keys, keys[:1], keys]), [1.0] * 3 + [1e-4] + [1.0] * 3,
                            replace_noise=[False] * 4 + [True] * 3, iters=50)
    alone = np.concatenate([phased_erm_runs(loss, x, y, dom, keys, 1.0, iters=50),
                            phased_erm_runs(loss, x, y, dom, keys[:1], 1e-4, iters=50),
                            phased_erm_runs(loss, x, y, dom, keys, 1.0, replace_noise=True, iters=50)])
    np.testing.assert_allclose(lanes, alone, rtol=0, atol=1e-13)
    assert np.linalg.norm(lanes[0] - lanes[3]) > 1e-3 and np.linalg.norm(lanes[0] - lanes[4]) > 1e-3
    with pytest.raises(ValueError, match="lambdas"):
        phased.rate_shape_many(keys, loss, x, y, dom, np.ones((phased.num_phases(n, m), n)),
                               np.ones((2, phased.num_phases(n, m))), np.ones((2, phased.num_phases(n, m))))


def test_strongly_convex_erm_batched_runs_equal_the_algorithm_run_by_run():
    """D6 runs Algorithm 5 (rate-shape) for a batch of keys: theta* once, then M' vmapped over runs whose
    K' = K cap B(theta_0, R') differ. Each lane must equal the algorithm composed run by run from its steps
    (centring draw, K', Phased-ERM with lambda from 2R'); K is sized so that some lanes' K' is one ball
    (B(theta_0, R') inside K) and others two, so both groups and the regrouping are exercised."""
    n, m, d = 30, 4, 3
    x, y = P.exchangeable("logistic", n, m, d, 6)
    loss = P.Loss("logistic", radius=1.0, ridge=0.5)
    beta = 1 / (2 * n * n * m)
    sigma0 = loss.lipschitz / (loss.strong_convexity * n * math.sqrt(m))
    r_prime = phased.localisation_radius(sigma0, d, beta)
    star = M.minimiser(loss, x, y, M.Domain.ball(100.0, d))
    dom = M.Domain.ball(float(np.linalg.norm(star)) + r_prime, d)  # K' contains K's boundary for about half
    keys = jax.random.split(jax.random.key(9), 8)
    got = phased.strongly_convex_erm_rate_shape(keys, loss, x, y, dom, beta)
    balls = []
    for key, out in zip(keys, got):
        k0, k1 = jax.random.split(key)
        theta0 = dom.project(M.minimiser(loss, x, y, dom) + M.gaussian_noise(k0, sigma0, d))
        inner = dom.intersect(theta0, r_prime)
        balls.append(len(inner.radii))
        lam = P.erm_lambda(loss.lipschitz, 2 * r_prime, n, m, d, 1.0)
        ref = phased.phased_erm(k1, loss, x, y, inner, 0.5, 1e-6, beta, lam=lam, mode="rate-shape").theta
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-13)
    assert sorted(set(balls)) == [1, 2]
    np.testing.assert_allclose(phased.strongly_convex_erm(keys[3], loss, x, y, dom, 1.0, 1e-6, beta,
                                                          mode="rate-shape").theta, got[3], rtol=0, atol=0)


@pytest.mark.parametrize("variant", ["A4", "A4b"])
def test_phased_sco_batched_lanes_equal_masked_runs_one_key_at_a_time(variant):
    """D8 runs Phased-SCO's rate-shape runs as lanes of one program (``phased_sco_rate_shape``); each lane
    must equal the run with its key alone on the full data with the other groups masked (an independent
    composition; float64 reassociation only, as in the stacking test above), and the lanes must differ."""
    n, m, d, n0 = 64, 4, 3, 8
    x, y = P.exchangeable("absolute", n, m, d, 2)
    loss, dom = P.Loss("absolute", radius=1.0, smoothing=1e-2), M.Domain.ball(1.0, d)
    keys = jax.random.split(jax.random.key(7), 3)
    got = phased.phased_sco_rate_shape(keys, loss, x, y, dom, 1.0, 1e-6, variant=variant, min_group=n0)
    groups = phased._groups(n, m, 1.0, 1e-6, variant, n0)
    t = len(groups)
    lams = phased.phase_lambdas(phased.sco_lambda(loss.lipschitz, dom.diameter, n, m, d, 1.0,
                                                  t if variant == "A4b" else 1), t)
    masks = np.zeros((t, n))
    for i, (lo, hi) in enumerate(groups):
        masks[i, lo:hi] = 1.0
    sig = 2 * loss.lipschitz / (lams * np.array([hi - lo for lo, hi in groups]) * math.sqrt(m))
    for key, out in zip(keys, got):
        np.testing.assert_allclose(out, phased.rate_shape_many(key[None], loss, x, y, dom, masks, lams, sig)[0],
                                   rtol=0, atol=1e-10)
    assert min(np.linalg.norm(got[i] - got[j]) for i, j in ((0, 1), (0, 2), (1, 2))) > 1e-4
