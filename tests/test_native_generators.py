"""The qr_v2 and eigh native generators: shape, determinism and the defining property of every input family."""
from collections import Counter

import pytest
import torch

from checks.native import native_checker
from checks.native.draw import EPS, HIGH, LOW, ULP
from checks.native.matrix_specs import benchmark_count
from checks.problems import load_problem
from popcorn.errors import ProblemError

MODULES = {problem: native_checker(problem) for problem in ("qr_v2", "eigh")}
ALL = [(p, f) for p, m in MODULES.items() for f in m.families()]


def generate(problem, spec):
    return MODULES[problem].generate(spec)


def mixed_profiles(problem, spec):
    return MODULES[problem].mixed_profiles(spec)


def gen(problem, case, n=32, batch=4, cond=0, seed=7):
    return generate(problem, {"batch": batch, "n": n, "cond": cond, "seed": seed, "case": case})


def f64(A):
    return A.double()


def eigvals(A):
    return torch.linalg.eigvalsh(f64(A))


def off_band(n, width):
    i = torch.arange(n)
    return (i[:, None] - i[None, :]).abs() > width


def logspace(a, b, n):
    return torch.logspace(a, b, n, dtype=torch.float64)


# ---------------------------------------------------------------- every family

@pytest.mark.parametrize("problem,case", ALL)
@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_every_family_shape_dtype_determinism(problem, case, n):
    A = gen(problem, case, n=n, batch=3, cond=2)
    assert A.shape == (3, n, n) and A.dtype == torch.float32 and A.is_contiguous()
    assert torch.isfinite(A).all()
    assert torch.equal(A, gen(problem, case, n=n, batch=3, cond=2))
    if problem == "eigh":
        assert torch.equal(A, A.mT)


def test_official_cases_all_have_generators():
    for problem, module in MODULES.items():
        spec = load_problem(problem)
        for s in spec.tests + spec.benchmarks:
            assert s["case"] in module.families(), s


def test_lapack_families_cover_the_official_names():
    names = {s["case"] for s in load_problem("eigh").tests if s["case"].startswith("lapack_")}
    assert len(names) == 18
    assert names <= set(MODULES["eigh"].families())


def test_family_functions_have_docstrings():
    for problem, case in ALL:
        assert MODULES[problem].FAMILIES[case].__doc__, (problem, case)


def test_seed_changes_the_draw():
    assert not torch.equal(gen("qr_v2", "dense", seed=1), gen("qr_v2", "dense", seed=2))
    assert not torch.equal(gen("eigh", "spectrum", seed=1), gen("eigh", "spectrum", seed=2))


def test_unknown_family_and_problem():
    with pytest.raises(ProblemError, match="known: dense, upper"):
        gen("qr_v2", "nosuch")
    assert native_checker("nosuch") is None


def test_default_case_is_dense():
    spec = {"batch": 2, "n": 8, "cond": 1, "seed": 3}
    assert torch.equal(generate("eigh", spec), generate("eigh", {**spec, "case": "dense"}))


# ---------------------------------------------------------------- qr_v2

def test_qr_dense_is_seeded_normal_draw_with_column_scaling():
    g = torch.Generator().manual_seed(11)
    A0 = torch.randn(2, 16, 16, generator=g)
    assert torch.equal(gen("qr_v2", "dense", n=16, batch=2, seed=11), A0)
    A = gen("qr_v2", "dense", n=16, batch=2, cond=3, seed=11)
    torch.testing.assert_close(f64(A), f64(A0) * logspace(0, -3, 16), rtol=1e-6, atol=0)


def test_qr_upper_is_triangular():
    A = gen("qr_v2", "upper")
    upper = torch.ones(32, 32, dtype=torch.bool).triu()
    assert (A[:, ~upper] == 0).all() and (A[:, upper] != 0).all()


def test_qr_diagonal():
    A = gen("qr_v2", "diagonal", n=16, cond=1)
    d = A.diagonal(dim1=-2, dim2=-1)
    assert torch.equal(A, torch.diag_embed(d))
    torch.testing.assert_close(f64(d.abs()), logspace(0, -2, 16).expand(4, -1), rtol=1e-6, atol=0)
    assert (d < 0).any() and (d > 0).any()


def test_qr_rankdef():
    A = gen("qr_v2", "rankdef", n=32, cond=1)
    assert (A[..., 24:] == 0).all() and (A[..., :24] != 0).all()
    assert (torch.linalg.matrix_rank(f64(A)) == 24).all()


def test_qr_nearrank():
    A = f64(gen("qr_v2", "nearrank", n=32))
    assert ((A[..., 24:] - A[..., :8]).abs().max() < 1e-4)
    s = torch.linalg.svdvals(A)
    assert (s[:, 24:] < 1e-4).all() and (s[:, :24] > 1e-3).all()


def test_qr_clustered_column_scales():
    n = 32
    norms = torch.linalg.vector_norm(f64(gen("qr_v2", "clustered", n=n, batch=8)), dim=-2) / n ** 0.5
    big, small, mid = norms[:, :14], norms[:, 18:], norms[:, 14:18]
    assert ((big > 0.3) & (big < 3)).all()
    assert ((small > 0.3 * 4 * EPS) & (small < 3 * 4 * EPS)).all()
    assert ((mid > 0.3 * EPS ** 0.5) & (mid < 3 * EPS ** 0.5)).all()


@pytest.mark.parametrize("n,width", [(8, 2), (64, 2), (128, 4), (2048, 32)])
def test_qr_band(n, width):
    A = gen("qr_v2", "band", n=n, batch=1)
    assert (A[:, off_band(n, width)] == 0).all()
    assert (A[:, ~off_band(n, width)] != 0).all()


def test_qr_nearcollinear_columns_nearly_parallel():
    A = f64(gen("qr_v2", "nearcollinear", n=32, cond=2))
    u = A / torch.linalg.vector_norm(A, dim=-2, keepdim=True)
    assert ((u.mT @ u).abs() > 1 - 1e-6).all()


def test_qr_rowscale():
    n = 32
    A = f64(gen("qr_v2", "rowscale", n=n, batch=8, cond=1))   # max(cond, 4) = 4
    unscaled = A / logspace(0, -4, n)[:, None]
    norms = torch.linalg.vector_norm(unscaled, dim=-1) / n ** 0.5
    assert ((norms > 0.3) & (norms < 3)).all()


# ---------------------------------------------------------------- eigh

def test_eigh_dense_is_symmetrized_draw_then_two_sided_scaling():
    g = torch.Generator().manual_seed(5)
    A0 = f64(torch.randn(2, 16, 16, generator=g))
    S = (A0 + A0.mT) / 2
    assert torch.equal(gen("eigh", "dense", n=16, batch=2, seed=5), S.float())
    d = logspace(0, -2, 16)
    A = gen("eigh", "dense", n=16, batch=2, cond=2, seed=5)
    torch.testing.assert_close(f64(A), d[:, None] * S * d, rtol=1e-6, atol=0)


def test_eigh_spectrum_matches_planted_values():
    v = logspace(-3, 0, 32)
    v[0::2] *= -1
    torch.testing.assert_close(eigvals(gen("eigh", "spectrum", cond=3)), v.sort().values.expand(4, -1),
                               rtol=0, atol=1e-6)


def test_eigh_psd():
    w = eigvals(gen("eigh", "psd", cond=2))
    assert (w >= -1e-6 * w.abs().amax(-1, keepdim=True)).all()


def test_eigh_rankdef_matches_planted_values():
    v = torch.cat([torch.zeros(8, dtype=torch.float64), logspace(-1, 0, 24)])
    torch.testing.assert_close(eigvals(gen("eigh", "rankdef")), v.expand(4, -1), rtol=0, atol=1e-6)


def test_eigh_nearrank_matches_planted_values():
    v = torch.cat([1e-6 * logspace(-2, 0, 8), logspace(-1, 0, 24)])
    torch.testing.assert_close(eigvals(gen("eigh", "nearrank")), v.expand(4, -1), rtol=0, atol=1e-6)


@pytest.mark.parametrize("n,g", [(32, 4), (512, 16), (4, 1)])
def test_eigh_repeated(n, g):
    w = eigvals(gen("eigh", "repeated", n=n, batch=2))
    values = torch.linspace(-1, 1, g, dtype=torch.float64).repeat_interleave(n // g)
    torch.testing.assert_close(w, values.expand(2, -1), rtol=0, atol=1e-5)


def test_eigh_clustered_two_tight_clusters():
    n = 48
    w = eigvals(gen("eigh", "clustered", n=n))
    assert ((w.abs() - 1).abs() < 1e-4).all()
    assert ((w - 1).abs() < 1e-5).sum(-1).min() >= n // 3
    assert (w < 0).any()


def test_eigh_diagonal():
    A = gen("eigh", "diagonal", n=16, cond=2)
    v = logspace(-2, 0, 16)
    v[0::2] *= -1
    assert torch.equal(A, torch.diag_embed(A.diagonal(dim1=-2, dim2=-1)))
    torch.testing.assert_close(f64(A.diagonal(dim1=-2, dim2=-1)), v.expand(4, -1), rtol=1e-6, atol=0)


def test_eigh_band():
    n = 128
    A = gen("eigh", "band", n=n)
    assert (A[:, off_band(n, 4)] == 0).all() and (A[:, ~off_band(n, 4)] != 0).all()


def test_eigh_rowscale():
    n = 16
    A = f64(gen("eigh", "rowscale", n=n, batch=2, seed=5))
    g = torch.Generator().manual_seed(5)
    A0 = f64(torch.randn(2, n, n, generator=g))
    d = logspace(0, -4, n)
    torch.testing.assert_close(A, d[:, None] * (A0 + A0.mT) / 2 * d, rtol=1e-6, atol=0)


# ---------------------------------------------------------------- eigh: LAPACK types

def test_lapack_zero_and_identity():
    assert (gen("eigh", "lapack_zero") == 0).all()
    assert torch.equal(gen("eigh", "lapack_identity", n=8), torch.eye(8).expand(4, 8, 8))


SPECTRA = {
    "even": torch.linspace(1, ULP, 32, dtype=torch.float64),
    "geometric": torch.logspace(0, torch.log10(torch.tensor(ULP)).item(), 32, dtype=torch.float64),
    "clustered": torch.tensor([1.0] + [ULP] * 31, dtype=torch.float64),
}
SCALES = {"spectrum": 1.0, "high_magnitude": HIGH, "low_magnitude": LOW}


def sorted_abs(x):
    return x.abs().sort(dim=-1).values


@pytest.mark.parametrize("spectrum", SPECTRA)
@pytest.mark.parametrize("magnitude", SCALES)
def test_lapack_diag(spectrum, magnitude):
    A = gen("eigh", f"lapack_diag_{spectrum}_{magnitude}")
    d = A.diagonal(dim1=-2, dim2=-1)
    assert torch.equal(A, torch.diag_embed(d))
    expected = sorted_abs(SPECTRA[spectrum] * SCALES[magnitude]).expand(4, -1)
    torch.testing.assert_close(sorted_abs(f64(d)), expected, rtol=1e-6, atol=0)
    assert (d < 0).any() and (d > 0).any()


@pytest.mark.parametrize("case,spectrum,magnitude", [
    ("lapack_dense_even_spectrum", "even", "spectrum"),
    ("lapack_dense_geometric_spectrum", "geometric", "spectrum"),
    ("lapack_dense_clustered_spectrum", "clustered", "spectrum"),
    ("lapack_dense_even_high_magnitude", "even", "high_magnitude"),
    ("lapack_dense_even_low_magnitude", "even", "low_magnitude"),
])
def test_lapack_dense_planted_spectra(case, spectrum, magnitude):
    scale = SCALES[magnitude]
    w = eigvals(f64(gen("eigh", case)) / scale)
    torch.testing.assert_close(sorted_abs(w), sorted_abs(SPECTRA[spectrum]).expand(4, -1), rtol=0, atol=1e-6)


@pytest.mark.parametrize("case,scale", [
    ("lapack_diag_geometric_high_magnitude", HIGH), ("lapack_dense_even_high_magnitude", HIGH),
    ("lapack_random_symmetric_high_magnitude", HIGH), ("lapack_band_even_high_magnitude", HIGH),
    ("lapack_diag_geometric_low_magnitude", LOW), ("lapack_dense_even_low_magnitude", LOW),
    ("lapack_random_symmetric_low_magnitude", LOW), ("lapack_band_even_low_magnitude", LOW),
])
def test_lapack_magnitudes(case, scale):
    assert 1.8e19 < HIGH < 1.9e19 and 1.0e-19 < LOW < 1.2e-19
    peak = f64(gen("eigh", case)).abs().amax().item()
    assert 1e-2 * scale < peak <= scale


def test_lapack_random_symmetric_is_a_symmetrized_uniform_draw():
    # official: U = uniform_(-1, 1) on a float32 (b, n, n) tensor, then 0.5 (U + U^T); no A0 draw
    g = torch.Generator().manual_seed(7)
    U = torch.empty(4, 16, 16).uniform_(-1.0, 1.0, generator=g)
    assert torch.equal(gen("eigh", "lapack_random_symmetric", n=16), 0.5 * (U + U.mT))
    high = gen("eigh", "lapack_random_symmetric_high_magnitude", n=16)
    assert torch.equal(high, 0.5 * (U + U.mT) * HIGH)


def test_lapack_band_random_bandwidth_per_matrix():
    n = 32
    A = gen("eigh", "lapack_band_even_spectrum", n=n, batch=8)
    i = torch.arange(n)
    dist = (i[:, None] - i[None, :]).abs().expand(8, n, n)
    widths = torch.where(A != 0, dist, 0).flatten(1).amax(-1)
    assert len(set(widths.tolist())) > 1
    for a, w in zip(A, widths):
        assert (a[dist[0] <= w] != 0).all()


# ---------------------------------------------------------------- mixed

@pytest.mark.parametrize("problem", list(MODULES))
def test_mixed_weights_over_many_draws(problem):
    spec = {"batch": 4000, "n": 8, "cond": 2, "seed": 3, "case": "mixed"}
    counts = Counter(mixed_profiles(problem, spec))
    weights = MODULES[problem].MIXED_WEIGHTS
    total = sum(weights.values())
    assert set(counts) == set(weights)
    for name, w in weights.items():
        assert abs(counts[name] / 4000 - w / total) < 0.03, (name, counts)


@pytest.mark.parametrize("problem", list(MODULES))
def test_mixed_has_dense_and_non_dense(problem):
    for seed in range(200):
        for batch in (2, 3):
            profiles = mixed_profiles(problem, {"batch": batch, "n": 4, "cond": 0, "seed": seed,
                                                "case": "mixed"})
            assert "dense" in profiles and any(p != "dense" for p in profiles), (seed, profiles)


def test_mixed_profiles_match_generate():
    n = 64
    spec = {"batch": 48, "n": n, "cond": 0, "seed": 12, "case": "mixed"}
    A = generate("qr_v2", spec)
    profiles = mixed_profiles("qr_v2", spec)
    assert len(profiles) == 48 and len(set(profiles)) >= 4
    for a, p in zip(A, profiles):
        assert ((a[:, 48:] == 0).all()) == (p == "rankdef"), p
        assert ((a[off_band(n, 2)] == 0).all()) == (p == "band"), p


def test_mixed_profiles_of_a_plain_case():
    spec = {"batch": 3, "n": 8, "cond": 0, "seed": 1, "case": "psd"}
    assert mixed_profiles("eigh", spec) == ["psd"] * 3


# ---------------------------------------------------------------- the official draw order, bit for bit
# These rebuild an input from the stated facts (docs/harness-agreement.md) with a seeded CPU generator:
# A0 = randn(b, n, n) first for every non-LAPACK case, the family's own draws after it, float32 arithmetic.

def seeded(seed):
    return torch.Generator().manual_seed(seed)


def orthogonal(g, b, n):
    """Q of the QR of a fresh gaussian; column j negated unless R_jj > 0."""
    Q, R = torch.linalg.qr(torch.randn(b, n, n, generator=g))
    return Q * torch.where(R.diagonal(dim1=-2, dim2=-1) > 0, 1.0, -1.0)[:, None, :]


def planted(g, values):
    Q = orthogonal(g, *values.shape)
    A = (Q * values[:, None, :]) @ Q.mT
    return 0.5 * (A + A.mT)


def test_qr_diagonal_signs_come_from_a_normal_draw_after_a0():
    g = seeded(9)
    torch.randn(3, 8, 8, generator=g)                       # A0, discarded
    d = torch.randn(3, 8, generator=g)
    expected = torch.diag_embed(torch.where(d > 0, 1.0, -1.0) * torch.logspace(0, -2, 8))
    assert torch.equal(gen("qr_v2", "diagonal", n=8, batch=3, cond=1, seed=9), expected)


def test_qr_nearcollinear_discards_a0():
    g = seeded(4)
    torch.randn(2, 8, 8, generator=g)
    base, noise = torch.randn(2, 8, 1, generator=g), torch.randn(2, 8, 8, generator=g)
    expected = (base.expand(2, 8, 8) + 1e-4 * noise) * torch.logspace(0, -2, 8)
    assert torch.equal(gen("qr_v2", "nearcollinear", n=8, batch=2, cond=2, seed=4), expected)


@pytest.mark.parametrize("n,special", [(1, 0), (2, 1), (3, 1), (5, 2), (6, 2), (7, 2), (8, 2)])
def test_rank_split_is_max_1_3n_over_4(n, special):
    # the kept rank is max(1, 3n // 4); the other n - rank columns / eigenvalues are the special ones
    A = gen("qr_v2", "rankdef", n=n, batch=2, cond=0)
    assert (A[..., n - special:] == 0).all() and (A[..., :n - special] != 0).all()
    B = gen("qr_v2", "nearrank", n=n, batch=2, cond=0, seed=5)
    g = seeded(5)
    A0 = torch.randn(2, n, n, generator=g)
    if special:
        A0[..., n - special:] = A0[..., :special] + 1e-5 * torch.randn(2, n, special, generator=g)
    assert torch.equal(B, A0)
    w = eigvals(gen("eigh", "rankdef", n=n, batch=2, cond=0))
    assert ((w.abs() < 1e-6).sum(-1) == special).all()


def test_qr_clustered_sqrt_eps_columns_only_from_n_8():
    for n in (4, 7):
        A = f64(gen("qr_v2", "clustered", n=n, batch=2, seed=3))
        A0 = f64(torch.randn(2, n, n, generator=seeded(3)))
        d = torch.ones(n, dtype=torch.float64)
        d[n // 2:] = 4 * EPS
        torch.testing.assert_close(A, A0 * d, rtol=0, atol=0)
    A = gen("qr_v2", "clustered", n=8, batch=1, seed=3)
    A0 = torch.randn(1, 8, 8, generator=seeded(3))
    assert torch.equal(A[..., 2:6], A0[..., 2:6] * torch.sqrt(torch.tensor(EPS, dtype=torch.float32)))


def test_eigh_planted_q_is_drawn_after_a0():
    g = seeded(21)
    torch.randn(3, 8, 8, generator=g)
    v = torch.logspace(-2, 0, 8)
    v[0::2] *= -1
    assert torch.equal(gen("eigh", "spectrum", n=8, batch=3, cond=2, seed=21), planted(g, v.expand(3, 8)))


def test_eigh_two_sided_scaling_is_rows_first_then_symmetrized():
    A0 = torch.randn(2, 8, 8, generator=seeded(6))
    d = torch.logspace(0, -3, 8)
    S = d[:, None] * (0.5 * (A0 + A0.mT)) * d
    assert torch.equal(gen("eigh", "dense", n=8, batch=2, cond=3, seed=6), 0.5 * (S + S.mT))


def test_eigh_clustered_spectrum_is_deterministic():
    n = 30
    t = torch.linspace(-1, 1, n, dtype=torch.float64)
    v = torch.where(t > 0, 1.0, -1.0) + 1e-5 * t
    v[n // 3:2 * n // 3] = 1 + 1e-6 * t[n // 3:2 * n // 3]
    for seed in (1, 2):
        w = eigvals(gen("eigh", "clustered", n=n, batch=2, seed=seed))
        torch.testing.assert_close(w, v.sort().values.expand(2, -1), rtol=0, atol=1e-6)


def test_eigh_repeated_groups_of_ceil_n_over_g():
    n, g = 100, 12                                  # ceil(100 / 12) = 9: eleven groups of 9, one of 1
    values = torch.linspace(-1, 1, g, dtype=torch.float64).repeat_interleave(9)[:n]
    torch.testing.assert_close(eigvals(gen("eigh", "repeated", n=n, batch=1)), values[None], rtol=0, atol=1e-5)


def test_lapack_band_widths_drawn_after_q_from_0_to_n_minus_1():
    b, n = 6, 4
    g = seeded(8)
    signs = torch.randint(0, 2, (b, n), generator=g).float() * 2 - 1
    A = planted(g, torch.linspace(1, ULP, n).expand(b, n) * signs)
    width = torch.randint(0, n, (b,), generator=g)
    i = torch.arange(n)
    mask = (i[:, None] - i[None, :]).abs()[None] <= width[:, None, None]
    assert torch.equal(gen("eigh", "lapack_band_even_spectrum", n=n, batch=b, seed=8), A * mask)
    assert 0 in width.tolist()                       # a width of 0 (diagonal) is possible


def official_profiles(problem, b, n, seed):
    """The stated mixed procedure: A0, a float32-weight multinomial, a repair that draws only when needed."""
    names, weights = list(MODULES[problem].MIXED_WEIGHTS), list(MODULES[problem].MIXED_WEIGHTS.values())
    g = seeded(seed)
    torch.randn(b, n, n, generator=g)
    picks = torch.multinomial(torch.tensor(weights, dtype=torch.float32), b, True, generator=g)
    if b >= 2:
        if not (picks == 0).any():
            picks[int(torch.randint(0, b, (1,), generator=g))] = 0
        elif (picks == 0).all():
            pos = int(torch.randint(0, b, (1,), generator=g))
            picks[pos] = int(torch.randint(1, len(names), (1,), generator=g))   # uniform, not by weight
    return [names[p] for p in picks.tolist()]


@pytest.mark.parametrize("problem", list(MODULES))
def test_mixed_profiles_follow_the_official_draws(problem):
    for seed in range(40):
        for b in (1, 2, 3, 17):
            spec = {"batch": b, "n": 4, "cond": 0, "seed": seed, "case": "mixed"}
            assert mixed_profiles(problem, spec) == official_profiles(problem, b, 4, seed), (seed, b)


def test_mixed_profiles_work_on_the_rows_of_a0():
    spec = {"batch": 24, "n": 8, "cond": 0, "seed": 5, "case": "mixed"}
    A0 = torch.randn(24, 8, 8, generator=seeded(5))
    for problem, expect in (("qr_v2", A0), ("eigh", 0.5 * (A0 + A0.mT))):
        A = generate(problem, spec)
        dense = [i for i, p in enumerate(mixed_profiles(problem, spec)) if p == "dense"]
        assert dense and torch.equal(A[dense], expect[dense])


# ---------------------------------------------------------------- benchmark inputs and speed

def test_benchmark_count():
    assert benchmark_count({"batch": 20, "n": 32}) == 50
    assert benchmark_count({"batch": 640, "n": 512}) == 1
    assert benchmark_count({"batch": 8, "n": 2048}) == 2
    assert benchmark_count({"batch": 40, "n": 352}) == 13


def test_benchmark_inputs_seeds():
    spec = {"batch": 128, "n": 256, "cond": 1, "seed": 100, "case": "rankdef"}   # count 8
    inputs = MODULES["qr_v2"].benchmark_inputs(spec)
    assert len(inputs) == 8
    for i in (0, 7):
        assert torch.equal(inputs[i], generate("qr_v2", {**spec, "seed": 100 + 42 * (i + 1)}))


def test_largest_test_size_is_fast():
    import time
    t = time.perf_counter()
    gen("eigh", "lapack_band_even_high_magnitude", n=512, batch=16)
    assert time.perf_counter() - t < 10
