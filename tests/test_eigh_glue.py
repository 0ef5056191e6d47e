"""The torch glue of eigh's own CUDA route (reduction_route.py, tridiagonal_route.py, result_check.py) on CPU, with
its kernels' entry points answered by the models: the glue that writes less of the batch must give the same bits.

- (Q, L) of reduction_eigh_cuda equal, bit for bit, those of the glue as it was before (f766353: clones of the
  prescaled input and of Z, |A| for the prescale, A == 0 for the zero test, torch.cat of the merges' products),
  which this file keeps as its reference, on several families and shapes.
- result_check's measures (fp32, in place) agree with the earlier formulation to the rounding of their sums, and
  accept or reject the same matrices.
- the glue makes fewer temporaries of the batch's size: counted per aten op, the stand-ins' own work left out.
"""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from checks.native import native_checker
from parts.common.cuda_loader import CUDA
from parts.eigh import reduction_route, result_check, tridiagonal_model, tridiagonal_route
from parts.eigh.reduction_model import PANEL, tridiagonalize_model
from parts.eigh.result_check import ACCEPT, fp32_product

CHECKER = native_checker("eigh")
FAMILIES = tuple(CHECKER.families())
EPS = 2.0 ** -23
# How far the check's measures may move (gate units): addcmul_ subtracts Q diag(L) from A Q without rounding the
# product Q L first (a fused multiply-add on CPU), up to 0.5 ulp of each |q l| (<= 0.5 / sqrt(n) units in all; measured
# <= 0.007 at n = 48, 0.0015 at n = 128, as close to the checker's float64 as before), and the column sums add in
# another order (vector_norm against abs().sum()). 0.02 units is 1% of the eigen equation's ACCEPT (2).
MEASURE_RTOL, MEASURE_ATOL = 1e-4, 0.02


class ModelKernels:
    """CUDA.call's stand-in: each entry point's outputs filled by its model; the reduction's input (which the
    kernel leaves holding its trailing matrices) is then filled with NaN, so glue that read it again would show."""

    def __init__(self):
        self.inside = False

    def __call__(self, entry: str, *args):
        self.inside = True
        try:
            getattr(self, entry)(*args)
        finally:
            self.inside = False

    @staticmethod
    def eigh_tridiagonalize(A, d, e, V, T, *_):
        for out, value in zip((d, e, V, T), tridiagonalize_model(A, PANEL)):
            out.copy_(value)
        A.fill_(float("nan"))

    @staticmethod
    def eigh_tridiagonal_leaves(d, e, w, Z, *_):
        w_model, Z_model = tridiagonal_model.solve_leaf(d, e)
        w.copy_(w_model)
        Z.copy_(Z_model)

    @staticmethod
    def eigh_tridiagonal_merge(w1, Z1, w2, Z2, beta, values, S, *_):
        values_model, S_model = tridiagonal_model.merge_factors(w1, Z1, w2, Z2, beta)
        values.copy_(values_model)
        S.copy_(S_model)


def solve_on_cpu(d, e):
    """tridiagonal_route.tridiagonal_eigh_cuda without its device check (its glue and stand-in kernels)."""
    return tridiagonal_model.tridiagonal_eigh_model(d, e, tridiagonal_model.LEAF_SIZE,
                                                    tridiagonal_route.solve_leaves_cuda, tridiagonal_route.merge_cuda)


@pytest.fixture
def kernels(monkeypatch):
    stand_in = ModelKernels()
    monkeypatch.setattr(CUDA, "call", stand_in)
    monkeypatch.setattr(reduction_route, "tridiagonal_eigh_cuda", solve_on_cpu)
    return stand_in


# ---------------------------------------------------------------------------------------------
# The glue as it was (f766353), the reference.
# ---------------------------------------------------------------------------------------------

def previous_power_of_two_scale(entries):
    largest = entries.abs().amax(dim=1)
    _, exponent = torch.frexp(largest)
    return torch.where(largest > 0, torch.ldexp(torch.ones_like(largest), exponent), torch.ones_like(largest))


def previous_back_multiply(Z1, Z2, S):
    n1 = Z1.shape[1]
    return torch.cat([Z1 @ S[:, :n1], Z2 @ S[:, n1:]], dim=1)


def previous_apply_q(V, T, Z):
    panel = max(T.shape[2], 1)
    Z = Z.clone()
    for k in reversed(range(0, V.shape[2], panel)):
        nb = min(panel, V.shape[2] - k)
        Vk, Tk = V[:, k + 1:, k:k + nb], T[:, k:k + nb, :nb]
        Z[:, k + 1:] -= Vk @ (Tk @ (Vk.mT @ Z[:, k + 1:]))
    return Z


def previous_route(A, monkeypatch):
    """reduction_eigh_cuda's pipeline before: prescale by |A|, clone for the kernel, cat in the merges, A == 0,
    a clone of Z for the back-transform."""
    with monkeypatch.context() as patch:
        patch.setattr(tridiagonal_model, "power_of_two_scale", previous_power_of_two_scale)
        patch.setattr(tridiagonal_route, "back_multiply", previous_back_multiply)
        scale = previous_power_of_two_scale(A.flatten(1))
        scaled = A / scale[:, None, None]
        d, e, V, T = reduction_route.tridiagonalize_cuda(scaled, PANEL)         # its clone, as before
        w, Z = solve_on_cpu(d, e)
        zero = (A == 0).flatten(1).all(dim=1)
        L = torch.where(zero[:, None], torch.zeros_like(w), w * scale[:, None])
        return previous_apply_q(V, T, Z), L


def previous_column_l1(X):
    return X.abs().sum(dim=-2).amax(dim=-1)


def previous_residual_units(A, Q, L, product="ieee"):
    n = A.shape[-1]
    scale = previous_power_of_two_scale(A.flatten(1))
    scaled = A / scale[:, None, None]
    residual = previous_column_l1(fp32_product(scaled, Q, product) - Q * (L / scale[:, None])[:, None, :])
    unit = n * EPS * previous_column_l1(scaled)
    eye = torch.eye(n, dtype=Q.dtype, device=Q.device)
    descent = (L[:, :-1] - L[:, 1:]).amax(dim=-1).clamp(min=0) if n > 1 else torch.zeros_like(unit)
    return {
        "eigen_equation": torch.where(unit > 0, residual / unit.clamp(min=torch.finfo(A.dtype).tiny),
                                      torch.where(residual == 0, 0.0, float("inf"))),
        "orthogonality": previous_column_l1(fp32_product(Q.mT, Q, product) - eye) / (n * EPS),
        "sorted": descent / (n * EPS * L.abs().amax(dim=-1).clamp(min=1.0)),
    }


def previous_rejected(A, Q, L, product="ieee"):
    accepted = torch.isfinite(Q).flatten(1).all(dim=1) & torch.isfinite(L).all(dim=1)
    for name, units in previous_residual_units(A, Q, L, product).items():
        accepted = accepted & (units < ACCEPT[name])
    return ~accepted


# ---------------------------------------------------------------------------------------------

def bits(x: torch.Tensor) -> torch.Tensor:
    """x's bit patterns: equal bits, not equal values (-0 is not 0, a NaN is itself)."""
    return x.contiguous().view(torch.int32)


def generate(family: str, batch: int, n: int, seed: int = 5):
    return CHECKER.generate({"batch": batch, "n": n, "cond": 2, "seed": seed, "case": family})


SHAPES = [(3, 40), (2, 67)]
SAMPLED = ("dense", "clustered", "repeated", "rowscale", "mixed", "lapack_zero", "lapack_identity",
           "lapack_diag_clustered_spectrum", "lapack_dense_even_high_magnitude",
           "lapack_random_symmetric_low_magnitude")


@pytest.mark.parametrize("batch, n", SHAPES)
@pytest.mark.parametrize("family", SAMPLED)
def test_the_route_s_glue_gives_the_previous_glue_s_bits(kernels, monkeypatch, family, batch, n):
    A = generate(family, batch, n)
    Q, L = reduction_route.reduction_eigh_cuda(A)
    Q_before, L_before = previous_route(A, monkeypatch)
    assert torch.equal(bits(Q), bits(Q_before)) and torch.equal(bits(L), bits(L_before))
    assert CHECKER.check_output(A, (Q, L)).passed                  # and the stand-ins did solve it


def test_a_batch_with_zero_matrices_keeps_their_exact_zero_eigenvalues(kernels, monkeypatch):
    A = generate("dense", 4, 40)
    A[1] = 0.0
    A[3] = -0.0
    Q, L = reduction_route.reduction_eigh_cuda(A)
    assert torch.equal(bits(L[[1, 3]]), torch.zeros(2, 40, dtype=torch.int32))
    assert torch.equal(bits(Q), bits(previous_route(A, monkeypatch)[0]))


def test_the_route_leaves_its_input_as_it_was(kernels):
    A = generate("dense", 2, 40)
    before = A.clone()
    reduction_route.reduction_eigh_cuda(A)
    assert torch.equal(bits(A), bits(before))


def test_standalone_tridiagonalize_keeps_its_input_and_overwrite_works_in_it(kernels):
    A = generate("dense", 2, 40)
    before = A.clone()
    kept = reduction_route.tridiagonalize_cuda(A)
    assert torch.equal(bits(A), bits(before))
    overwritten = reduction_route.tridiagonalize_cuda(A, overwrite=True)
    assert torch.isnan(A).all()                                    # the stand-in's mark: the kernel worked in A
    assert all(torch.equal(bits(x), bits(y)) for x, y in zip(kept, overwritten))


def test_back_multiply_writes_both_products_in_place_and_equals_the_cat(monkeypatch):
    g = torch.Generator().manual_seed(3)
    for n1, n2 in [(16, 16), (33, 34), (64, 64)]:
        Z1, Z2 = torch.randn(3, n1, n1, generator=g), torch.randn(3, n2, n2, generator=g)
        S = torch.randn(3, n1 + n2, n1 + n2, generator=g)
        made = []
        real_empty = torch.empty

        def recording_empty(*args, **kwargs):
            made.append(real_empty(*args, **kwargs))
            return made[-1]

        with monkeypatch.context() as patch:
            patch.setattr(torch, "empty", recording_empty)
            Z = tridiagonal_model.back_multiply(Z1, Z2, S)
        assert len(made) == 1 and Z.data_ptr() == made[0].data_ptr()
        assert torch.equal(bits(Z), bits(previous_back_multiply(Z1, Z2, S)))


def test_largest_magnitude_is_the_max_of_abs_nan_and_inf_included():
    x = torch.randn(4, 50, generator=torch.Generator().manual_seed(4))
    x[1, 7], x[2, 3], x[3] = float("nan"), -float("inf"), 0.0
    x[3, 5] = -0.0
    got, expected = tridiagonal_model.largest_magnitude(x), x.abs().amax(dim=1)
    assert torch.equal(bits(got), bits(expected))
    assert torch.equal(tridiagonal_model.power_of_two_scale(x[[0, 3]]), previous_power_of_two_scale(x[[0, 3]]))


# ---------------------------------------------------------------------------------------------
# result_check
# ---------------------------------------------------------------------------------------------

def assert_measures_agree(A, Q, L, product="ieee"):
    ours, before = result_check.residual_units(A, Q, L, product), previous_residual_units(A, Q, L, product)
    for name in ACCEPT:
        finite = torch.isfinite(before[name])
        assert torch.equal(finite, torch.isfinite(ours[name])), name
        assert torch.equal(ours[name][~finite].isnan(), before[name][~finite].isnan()), name
        assert torch.allclose(ours[name][finite], before[name][finite], rtol=MEASURE_RTOL, atol=MEASURE_ATOL), \
            (name, ours[name], before[name])
    assert torch.equal(result_check.rejected(A, Q, L, product), previous_rejected(A, Q, L, product))


@pytest.mark.parametrize("product", ["ieee", "tf32x3"])
@pytest.mark.parametrize("family", FAMILIES)
def test_the_checks_measures_and_verdicts_are_the_previous_ones_on_every_family(family, product):
    A = generate(family, 3, 48)
    values, vectors = torch.linalg.eigh(A.double())
    assert_measures_agree(A, vectors.float(), values.float(), product)


@pytest.mark.parametrize("spoil", ["noise", "swap columns", "move an eigenvalue", "unsorted", "nan", "inf",
                                   "zero matrix"])
def test_the_checks_verdicts_are_the_previous_ones_on_wrong_answers(spoil):
    A = generate("spectrum", 4, 40)
    values, vectors = torch.linalg.eigh(A.double())
    Q, L = vectors.float(), values.float()
    g = torch.Generator().manual_seed(6)
    if spoil == "noise":                                           # around each acceptance threshold
        Q = Q + torch.randn(Q.shape, generator=g) * (torch.tensor([0.1, 1.0, 10.0, 60.0]) * EPS)[:, None, None]
    elif spoil == "swap columns":
        Q[1, :, [3, 20]] = Q[1, :, [20, 3]]
    elif spoil == "move an eigenvalue":
        L[2, 10] += 1e-3 * L[2].abs().amax()
    elif spoil == "unsorted":
        L[1, [0, 39]] = L[1, [39, 0]]
    elif spoil == "nan":
        Q[1, 5, 5] = float("nan")
    elif spoil == "inf":
        L[2, 2] = float("inf")
    else:
        A[0], Q[0], L[0] = 0.0, torch.eye(40), 0.0
        L[2] = 0.0
    assert_measures_agree(A, Q, L)


def test_the_checks_verdicts_are_the_previous_ones_on_the_route_s_outputs(kernels):
    for family in ("dense", "clustered", "lapack_dense_clustered_spectrum", "lapack_diag_even_low_magnitude"):
        A = generate(family, 3, 67)
        assert_measures_agree(A, *reduction_route.reduction_eigh_cuda(A))


# ---------------------------------------------------------------------------------------------
# Temporaries of the batch's size
# ---------------------------------------------------------------------------------------------

class BatchSizedTensors(TorchDispatchMode):
    """Every tensor an aten op makes (storage of its own, not one of its inputs') of at least `numel` entries,
    as (op, shape, dtype); nothing while the kernels' stand-in runs (a kernel's own work)."""

    def __init__(self, numel: int, kernels: ModelKernels):
        super().__init__()
        self.numel, self.kernels, self.made = numel, kernels, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self.kernels.inside:
            given = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
            for t in tree_leaves(out):
                if (isinstance(t, torch.Tensor) and t.numel() >= self.numel
                        and t.untyped_storage().data_ptr() not in given):
                    self.made.append((func._overloadpacket.__name__, tuple(t.shape), t.dtype))
        return out


def batch_sized(run, A, kernels):
    b, n, _ = A.shape
    with BatchSizedTensors(b * n * n, kernels) as mode:
        run(A)
    return mode.made


def test_the_route_and_its_check_make_fewer_batch_sized_tensors(kernels, monkeypatch):
    """At 2 x 64 the route and its check now make 6 tensors of b n^2 entries: the pipeline's A / 2^k (the
    kernel works in it), the top merge's S and back_multiply's output (returned as Q), the check's A / 2^k, A Q and
    Q^T Q. Before: 21 (torch 2.13, CPU): those 6 (the cat for back_multiply's output), 2 clones, 5 |.| (two
    prescales, the two residuals, A'), A == 0, torch.isfinite's 4 (abs, ==, !=, *), Q diag(L) and two subtractions."""
    A = generate("dense", 2, 64)

    def now(A):
        Q, L = reduction_route.reduction_eigh_cuda(A)
        result_check.rejected(A, Q, L)

    def before(A):
        Q, L = previous_route(A, monkeypatch)
        previous_rejected(A, Q, L)

    made_now, made_before = batch_sized(now, A, kernels), batch_sized(before, A, kernels)
    assert sorted(name for name, _, _ in made_now) == ["bmm", "bmm", "div", "div", "empty", "empty"], made_now
    assert len(made_before) > len(made_now), made_before
