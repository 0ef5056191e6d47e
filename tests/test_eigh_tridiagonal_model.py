"""The symmetric tridiagonal eigensolver model (parts/eigh/tridiagonal_model.py) against float64 references.

Every check is per matrix, in float64, with the official gates' matrix 1-norm and eps = 2^-23:
- eigenvalues: max_i |w_i - w_ref_i| <= EIGENVALUE_BOUND * n eps ||T||. The solver is backward
  stable (its eigenvalues are exact for some T + E, ||E|| = O(n eps ||T||)), and by Weyl's theorem
  no eigenvalue moves more than ||E||.
- residual: ||T Z - Z diag(w)|| / (n ||T||) <= RESIDUAL_BOUND * eps.
- orthogonality: ||Z^T Z - I|| / n <= ORTHOGONALITY_BOUND * eps.
Why these numbers: the worst seen over an adversarial sweep (12 seeds x 9 families: gaussian, small
integer diagonals with couplings from 1 down to 1e-8, eigenvalue chains a few eps apart, graded
1..1e-20, log-random magnitudes, constant diagonals; n from 2 to 128; leaf sizes 1, 2, 8, 32) was
2.5 (a rank-one term at the slaed2 deflation tolerance, 4 eps, dropped from a 2 x 2), 5.8 (a
leaf vector mixing eigenvectors within a cluster that bisection cannot resolve, a few eps ||T||
wide) and 1.2. Each bound leaves 1.5x over that and is 25x (residual) to 50x (orthogonality)
tighter than the official eigh gates (200 n eps, 100 n eps), leaving the rest of the budget to
the tridiagonalisation and the back-transform.
"""
from __future__ import annotations

import pytest
import torch

from parts.eigh import tridiagonal_model as model
from parts.eigh.tridiagonal_model import tridiagonal_eigh_model

EPS = 2.0 ** -23
EIGENVALUE_BOUND = 4.0
RESIDUAL_BOUND = 8.0
ORTHOGONALITY_BOUND = 2.0


def dense(d: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """The tridiagonal matrices, batch x n x n, in float64."""
    d, e = d.double(), e.double()
    return torch.diag_embed(d) + torch.diag_embed(e, 1) + torch.diag_embed(e, -1)


def errors(d, e, w, Z):
    """Per matrix: (eigenvalue error / (n eps ||T||), residual / (n eps ||T||), orthogonality / (n eps))."""
    T = dense(d, e)
    n = d.shape[1]
    norm = torch.linalg.matrix_norm(T, 1)
    assert bool((norm > 0).all()), "errors() scales by ||T||; the zero matrix has its own test"
    w64, Z64 = w.double(), Z.double()
    eigenvalue = (w64 - torch.linalg.eigvalsh(T)).abs().amax(dim=1) / (n * EPS * norm)
    residual = torch.linalg.matrix_norm(T @ Z64 - Z64 * w64[:, None, :], 1) / (n * EPS * norm)
    eye = torch.eye(n, dtype=torch.float64)
    orthogonality = torch.linalg.matrix_norm(Z64.mT @ Z64 - eye, 1) / (n * EPS)
    return eigenvalue, residual, orthogonality


def assert_accurate(d, e, leaf_size=model.LEAF_SIZE, solve=tridiagonal_eigh_model):
    """Solve (by `solve(d, e, leaf_size)`), check shapes, order and the three bounds for every matrix;
    returns the worst (eigenvalue, residual, orthogonality)."""
    w, Z = solve(d, e, leaf_size)
    b, n = d.shape
    assert w.shape == (b, n) and Z.shape == (b, n, n) and w.dtype == Z.dtype == torch.float32
    assert bool(torch.isfinite(w).all() and torch.isfinite(Z).all())
    assert bool((w[:, 1:] >= w[:, :-1]).all()), "eigenvalues must ascend"
    eigenvalue, residual, orthogonality = errors(d, e, w, Z)
    worst = (eigenvalue.max().item(), residual.max().item(), orthogonality.max().item())
    assert worst[0] <= EIGENVALUE_BOUND, f"eigenvalue error {worst[0]:.3g} n eps ||T||"
    assert worst[1] <= RESIDUAL_BOUND, f"residual {worst[1]:.3g} n eps ||T||"
    assert worst[2] <= ORTHOGONALITY_BOUND, f"orthogonality {worst[2]:.3g} n eps"
    return worst


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# Whole solver.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n, leaf_size", [(1, 32), (2, 32), (3, 32), (17, 32), (33, 32), (64, 32), (100, 32),
                                          (128, 32), (2, 1), (3, 1), (17, 4), (64, 8), (100, 2), (128, 16)])
def test_random_tridiagonals_match_float64(n, leaf_size):
    g = generator(n * 100 + leaf_size)
    assert_accurate(torch.randn(3, n, generator=g), torch.randn(3, n - 1, generator=g), leaf_size)


def test_one_by_one_is_exact():
    d = torch.tensor([[2.5], [-0.0], [1e-30]])
    w, Z = tridiagonal_eigh_model(d, torch.zeros(3, 0))
    assert torch.equal(w, d) and torch.equal(Z, torch.ones(3, 1, 1))


@pytest.mark.parametrize("leaf_size", [32, 1])
def test_two_by_two_closed_form(leaf_size):
    """lam = (a + b)/2 -/+ hypot((a - b)/2, c); leaf_size 1 takes the merge path (two 1 x 1 leaves)."""
    d = torch.tensor([[3.0, -1.0], [1.0, 2.0], [0.5, 0.5], [1e-3, -2e-3]])
    e = torch.tensor([[0.0], [0.75], [-1e-6], [4e-3]])
    w, Z = tridiagonal_eigh_model(d, e, leaf_size)
    a, b, c = d[:, 0].double(), d[:, 1].double(), e[:, 0].double()
    radius = torch.hypot((a - b) / 2, c)
    expected = torch.stack([(a + b) / 2 - radius, (a + b) / 2 + radius], dim=1)
    scale = torch.maximum(d.abs().amax(dim=1), e.abs().amax(dim=1)).double()
    assert ((w.double() - expected).abs().amax(dim=1) <= 4 * EPS * scale).all()
    assert_accurate(d, e, leaf_size)


def wilkinson_plus(m: int = 21):
    """W_m^+: d_i = |(m-1)/2 - i|, e = 1; its largest eigenvalues come in pairs ~1e-14 apart."""
    half = (m - 1) / 2
    return torch.tensor([abs(half - i) for i in range(m)]), torch.ones(m - 1)


def glued_wilkinson(copies: int, glue: float):
    """`copies` W21+ blocks joined by off-diagonal `glue`: clusters of `copies` nearly equal eigenvalues."""
    d, e = wilkinson_plus()
    couplings = torch.cat([torch.cat([e, torch.tensor([glue])]) for _ in range(copies)])[:-1]
    return d.repeat(copies), couplings


def split_couplings(n: int, seed: int):
    """Gaussian, with zero couplings at both tear points of the first two levels and every 7th."""
    g = generator(seed)
    e = torch.randn(n - 1, generator=g)
    e[::7] = 0
    e[[n // 2 - 1, n // 4 - 1, n // 2 + n // 4 - 1]] = 0
    return torch.randn(n, generator=g), e


def graded(n: int, signs: bool):
    d = torch.logspace(0, -20, n)
    e = torch.sqrt(d[:-1] * d[1:])
    if signs:
        g = generator(n)
        d, e = d * torch.randn(n, generator=g), e * torch.randn(n - 1, generator=g)
    return d, e


def integer_diagonal_eps_couplings(n: int, seed: int):
    """d in {0, 1, 2}, couplings ~1e-7 (about eps): clusters of eigenvalues within a few eps of 0, 1 and 2."""
    g = generator(seed)
    return torch.randint(0, 3, (n,), generator=g).float(), 1e-7 * torch.randn(n - 1, generator=g)


def shift_next_to_a_cluster_member():
    """A 16-row leaf with a six-fold cluster at 1 where one member lies ~1e-16 from the float 1.0
    (rows 8-9 [[0, 1], [1, 0]] couple by 1e-4 to [[2, 1], [1, 1]], whose second-order shift cancels):
    with one shift per lane at the bisected 1.0, its eigenvector swamps the other lanes by 1e10."""
    d = torch.tensor([2.0, 0, 2, 1, 2, 1, 1, 1, 0, 0, 2, 1, 0, 0, 0, 1])
    e = torch.tensor([0.0, 0, 0, 1e-4, 0, 0, 1e-8, 0, 1, 1e-4, 1, 1e-4, 1e-4, 0, 1e-4])
    return d, e


def clustered_benchmark_leaf():
    """Rows 32-63 (after the tears) of the tridiagonal of matrix 572 of the 640x512 'clustered' benchmark input
    (cond 0, seed 770004), reduced in float32 by reduction_kernel_model in batches of 32 and scaled by the
    solver's power of two: 15 eigenvalues near -1/2 and 15 near +1/2, each chain with gaps of 1-13 eps ||T||.
    Grouped at gaps <= 4 eps ||T|| with each group's shift above it, shifts fell inside the chains and
    Gram-Schmidt cancelled to noise: residual 398 (model) and 707 (kernel order) n eps ||T||, the matrix's
    eigen equation at 18 units of n eps ||A|| (docs/priors.md, eigh)."""
    d = torch.tensor([
        0.495911181, -0.499968827, 0.499968141, -0.499886185, 0.499885023, -0.499688566, 0.499688089, -0.499322176,
        0.499321043, -0.497601449, 0.497600257, -0.494389415, 0.494388819, -0.483943164, 0.483941853, -0.43661806,
        0.43661654, -0.405053973, 0.405053318, -0.267761886, 0.267760158, 0.049395889, -0.0493966788, 0.239178285,
        -0.239179164, 0.401235461, -0.401236832, 0.470888197, -0.470889151, 0.487354696, -0.487356126, 0.438429713])
    e = torch.tensor([
        -0.000216872577, -0.00586734293, 0.000155437374, -0.0108113876, 8.86100752e-05, -0.0177379251,
        4.80444069e-05, -0.0260891877, -3.47934256e-05, -0.0489483811, 1.82419626e-05, -0.07471627, 1.11902682e-05,
        0.12570782, -7.08940661e-06, -0.243655443, -3.81432233e-06, 0.293145776, 3.14198974e-06, -0.422263741,
        2.54193196e-06, -0.497556955, 2.17748175e-06, 0.439085782, 3.47147784e-06, -0.298349053, -4.68218104e-06,
        -0.168127403, 7.91061393e-06, 0.111747637, 1.5102155e-05])
    return d, e


HARD = {
    "zero couplings at the tear points": lambda: split_couplings(100, 1),
    "Wilkinson W21+": wilkinson_plus,
    "glued Wilkinson, glue 1e-3": lambda: glued_wilkinson(6, 1e-3),
    "glued Wilkinson, glue 1e-7": lambda: glued_wilkinson(6, 1e-7),
    "glued Wilkinson, glue 0 (exactly repeated)": lambda: glued_wilkinson(6, 0.0),
    "equal diagonal, couplings 1e-7": lambda: (torch.ones(100), 1e-7 * torch.randn(99, generator=generator(2))),
    "equal diagonal, couplings 1e-10": lambda: (torch.ones(100), 1e-10 * torch.randn(99, generator=generator(3))),
    "equal diagonal, no couplings": lambda: (torch.ones(64), torch.zeros(63)),
    "graded 1 .. 1e-20": lambda: graded(100, signs=False),
    "graded 1e-20 .. 1": lambda: tuple(t.flip(0) for t in graded(100, signs=False)),
    "graded with random signs": lambda: graded(64, signs=True),
    "integer diagonal, couplings ~eps": lambda: integer_diagonal_eps_couplings(64, 35),
    "shift 1e-16 from one member of a cluster": shift_next_to_a_cluster_member,
    "clustered benchmark leaf: chains with gaps of 1-13 eps": clustered_benchmark_leaf,
}


@pytest.mark.parametrize("leaf_size", [32, 4])
@pytest.mark.parametrize("name", list(HARD))
def test_hard_spectra(name, leaf_size):
    d, e = HARD[name]()
    assert_accurate(d[None].float(), e[None].float(), leaf_size)


def test_equal_diagonal_without_couplings_is_exact():
    """diag(c, ..., c): everything deflates; the eigenvalues are c exactly and Z is orthogonal."""
    d = torch.full((2, 64), 0.75)
    w, Z = tridiagonal_eigh_model(d, torch.zeros(2, 63))
    assert torch.equal(w, d)
    assert torch.allclose(Z.mT @ Z, torch.eye(64).expand(2, 64, 64), atol=2 * EPS, rtol=0)


def test_zero_matrix():
    w, Z = tridiagonal_eigh_model(torch.zeros(2, 40), torch.zeros(2, 39))
    assert w.abs().max().item() <= 4 * torch.finfo(torch.float32).tiny
    assert torch.allclose(Z.mT @ Z, torch.eye(40).expand(2, 40, 40), atol=2 * EPS, rtol=0)


def test_power_of_two_scaling_is_exact_and_extreme_magnitudes_pass():
    """The model scales each matrix by a power of two, so 2^k T gives 2^k w and the same Z bit for bit;
    entries near 1.8e19 and 1e-19 (the lapack high/low magnitude cases) must not overflow or underflow."""
    g = generator(7)
    d, e = torch.randn(2, 64, generator=g), torch.randn(2, 63, generator=g)
    w, Z = tridiagonal_eigh_model(d, e)
    for k in (60, -60):
        wk, Zk = tridiagonal_eigh_model(d * 2.0 ** k, e * 2.0 ** k)
        assert torch.equal(wk, w * 2.0 ** k) and torch.equal(Zk, Z)
    for magnitude in (1.8e19, 1e-19):
        assert_accurate(d * magnitude, e * magnitude)


def test_mixed_batch_each_matrix_on_its_own_merits():
    """Matrices of different structure share a batch (and so the recursion tree, but not the deflation):
    each must pass alone, and match the solve of that matrix by itself."""
    n = 64
    g = generator(11)
    cases = [
        (torch.randn(n, generator=g), torch.randn(n - 1, generator=g)),
        split_couplings(n, 12),
        (torch.ones(n), 1e-7 * torch.randn(n - 1, generator=g)),
        graded(n, signs=True),
    ]
    d = torch.stack([c[0] for c in cases]).float()
    e = torch.stack([c[1] for c in cases]).float()
    assert_accurate(d, e)
    w, _ = tridiagonal_eigh_model(d, e)
    for i in range(len(cases)):
        alone, _ = tridiagonal_eigh_model(d[i:i + 1], e[i:i + 1])
        norm = torch.linalg.matrix_norm(dense(d[i:i + 1], e[i:i + 1]), 1).item()
        assert (w[i] - alone[0]).abs().max().item() <= EIGENVALUE_BOUND * n * EPS * norm


def test_rejects_mismatched_shapes():
    with pytest.raises(ValueError):
        tridiagonal_eigh_model(torch.zeros(2, 5), torch.zeros(2, 5))
    with pytest.raises(ValueError):
        tridiagonal_eigh_model(torch.zeros(2, 5), torch.zeros(2, 4), leaf_size=0)


# ---------------------------------------------------------------------------------------------
# Parts.
# ---------------------------------------------------------------------------------------------

def test_sturm_count_counts_the_eigenvalues_below_each_shift():
    g = generator(21)
    d, e = torch.randn(3, 30, generator=g), torch.randn(3, 29, generator=g)
    reference = torch.linalg.eigvalsh(dense(d, e))
    between = (0.5 * (reference[:, 1:] + reference[:, :-1])).float()      # one shift in each gap
    shifts = torch.cat([reference[:, :1].float() - 1, between, reference[:, -1:].float() + 1], dim=1)
    pivmin = torch.finfo(torch.float32).tiny * torch.ones(3, 1)
    counts = model.sturm_count(d, e * e, shifts, pivmin)
    assert torch.equal(counts, torch.arange(31).expand(3, 31))


def rank_one_matrix(D, z, rho):
    return torch.diag_embed(D.double()) + rho.double()[:, None, None] * z.double()[:, :, None] * z.double()[:, None, :]


def test_deflate_is_a_rotation_of_the_problem_up_to_its_tolerance():
    """X (diag(D') + rho z' z'^T) X^T = diag(D) + rho z z^T up to the dropped terms (each <= tol),
    with X the recorded rotations and z' zero on the deflated poles; the survivors are separated."""
    g = generator(31)
    n = 40
    D = torch.sort(torch.randn(2, n, generator=g), dim=1).values
    D[:, 10] = D[:, 9]                                   # an exact tie: rotated away
    D[:, 20] = D[:, 19] + 1e-8                           # a near tie: rotated away
    z = torch.randn(2, n, generator=g)
    z = z / torch.linalg.vector_norm(z, dim=1, keepdim=True)
    z[:, 30] = 1e-9                                      # a negligible weight: deflated as is
    rho = torch.tensor([1.0, 0.3])
    D2, z2, deflated, rotations = model.deflate(D, z, rho)
    partner = rotations[0]
    assert bool((partner != torch.arange(n)).any(dim=1).all()), "the data must exercise the rotations"
    assert bool(deflated[:, 30].all())
    z_kept = torch.where(deflated, torch.zeros_like(z2), z2)
    X = model.undo_rotations(torch.eye(n).expand(2, n, n), rotations).double()
    rebuilt = X @ rank_one_matrix(D2, z_kept, rho) @ X.mT
    tol = model.DEFLATION_TOL * EPS * torch.maximum(D.abs().amax(dim=1), z.abs().amax(dim=1)).double()
    difference = torch.linalg.matrix_norm(rebuilt - rank_one_matrix(D, z, rho), 2)
    assert bool((difference <= 4 * tol + 8 * EPS).all()), difference
    for b in range(2):
        live = ~deflated[b]
        assert bool(((D2[b][live][1:] - D2[b][live][:-1]) > 2 * tol[b]).all())
        assert bool((rho[b] * z2[b][live].abs() > tol[b]).all())


def test_secular_roots_interlace_and_the_loewner_vectors_are_orthogonal():
    """Poles 1e-5 apart (where z itself would give vectors far from orthogonal): the roots match the
    float64 eigenvalues of diag(d) + rho z z^T, interlace strictly, and the z_hat vectors are orthonormal."""
    g = generator(41)
    n = 24
    d = torch.cat([torch.linspace(-1, -1 + 23e-5, 12), torch.sort(torch.rand(12, generator=g)).values], dim=0)[None]
    z = torch.randn(1, n, generator=g)
    z = z / torch.linalg.vector_norm(z)
    rho = torch.tensor([0.7])
    live = torch.ones(1, n, dtype=torch.bool)
    origin, tau = model.solve_secular(d, z, rho, live)
    values, U = model.secular_vectors(d, z, rho, live, origin, tau)
    A = rank_one_matrix(d, z, rho)
    norm = torch.linalg.matrix_norm(A, 1).item()
    assert (values.double() - torch.linalg.eigvalsh(A)).abs().max().item() <= 2 * EPS * norm
    upper = torch.cat([d[:, 1:], d[:, -1:] + rho * (z * z).sum()], dim=1)
    assert bool(((values > d) & (values <= upper)).all())
    U64 = U.double()
    assert torch.linalg.matrix_norm(U64.mT @ U64 - torch.eye(n, dtype=torch.float64), 1).item() <= 2 * n * EPS
    residual = torch.linalg.matrix_norm(A @ U64 - U64 * values.double()[:, None, :], 1).item()
    assert residual <= 2 * n * EPS * norm


def test_cluster_shifts_share_one_shift_outside_each_chain_nearest_lanes_first():
    """A chain (gaps <= CLUSTER_GAP eps ||T||) shares one shift CLUSTER_OFFSET eps ||T|| outside it, on the side of
    its wider outer gap; shifted from above, its lanes take its eigenvalues from the top down (columns reversed)."""
    e = EPS
    w = torch.tensor([[-1.0, 0.0, 1e-8, 2e-8, 0.5, 1.0, 1.0],
                      [-1.0, 0.5 - 20 * e, 0.5, 0.5 + 2 * e, 0.5 + 4 * e, 1.0, 1.0 + 8 * e]])
    offset = model.CLUSTER_OFFSET * EPS
    assert 8 <= model.CLUSTER_GAP < 20                        # gaps of 2 and 8 eps chain, 20 eps splits
    expected = torch.tensor([[-1.0, -offset, -offset, -offset, 0.5, 1.0 + offset, 1.0 + offset],
                             [-1.0, 0.5 - 20 * e] + [0.5 + 4 * e + offset] * 3 + [1.0 + 8 * e + offset] * 2])
    shift, column = model.cluster_shifts(w, torch.tensor([1.0, 1.0]))
    assert torch.equal(shift, expected)
    assert column.tolist() == [[0, 1, 2, 3, 4, 6, 5], [0, 1, 4, 3, 2, 6, 5]]


def test_bisection_finds_every_leaf_eigenvalue_to_eps_norm():
    g = generator(51)
    d, e = torch.randn(4, 32, generator=g), torch.randn(4, 31, generator=g)
    lo, hi = model.gershgorin_interval(d, e)
    tnorm = torch.maximum(lo.abs(), hi.abs())
    w = model.bisect_leaf(d, e, lo, hi, tnorm)
    error = (w.double() - torch.linalg.eigvalsh(dense(d, e))).abs().amax(dim=1)
    assert bool((error <= EPS * tnorm.double()).all()), error / (EPS * tnorm)


def test_start_vectors_are_fixed_and_independent():
    x = model.start_vectors(32, 32, torch.float32, "cpu")
    assert torch.equal(x, model.start_vectors(32, 32, torch.float32, "cpu"))
    assert x.abs().max().item() <= 0.5
    singular = torch.linalg.svdvals(x.double())
    assert singular.min().item() > 1e-3 * singular.max().item()


def test_leaf_tree_shapes_follow_the_middle_split():
    """n = 33 with leaf 8: 16 + 17 -> 8 + 8 | 8 + 9 -> leaves of 8, 8, 8, 4 + 5;
    every path must agree on the spectrum."""
    g = generator(61)
    d, e = torch.randn(2, 33, generator=g), torch.randn(2, 32, generator=g)
    w_tree, _ = tridiagonal_eigh_model(d, e, 8)
    w_leaf, _ = tridiagonal_eigh_model(d, e, 33)
    norm = torch.linalg.matrix_norm(dense(d, e), 1).max().item()
    assert (w_tree - w_leaf).abs().max().item() <= 2 * EIGENVALUE_BOUND * 33 * EPS * norm


def test_gram_schmidt_orthonormalizes_nearly_dependent_rows():
    """Rows with condition number 1e3 (what inverse iteration hands over inside a cluster): one classical
    pass leaves orthogonality errors ~ eps cond^2; the second pass brings them back to ~ eps."""
    g = generator(71)
    n = 16
    left, _ = torch.linalg.qr(torch.randn(2, n, n, generator=g, dtype=torch.float64))
    right, _ = torch.linalg.qr(torch.randn(2, n, n, generator=g, dtype=torch.float64))
    x = (left * torch.logspace(0, -3, n, dtype=torch.float64)[None, None, :]) @ right.mT
    q = model.orthonormalize_rows(x.float()).double()
    loss = torch.linalg.matrix_norm(q @ q.mT - torch.eye(n, dtype=torch.float64), 1).max().item()
    assert loss <= ORTHOGONALITY_BOUND * n * EPS
