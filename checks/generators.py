"""Input generators: every case family of qr_v2 and eigh, as docs/problems.md defines them.

generate(problem, spec) returns the batch x n x n float32 input of one case; the same spec
gives the same tensor on the same device. Each family is a short function
family(draw, b, n, cond) -> float64 (b, n, n) tensor; generate() casts to float32 and, for eigh,
symmetrizes as (A + A^T)/2 in float64 first, so the float32 result is exactly symmetric
(rounding is elementwise, and a + b == b + a).

Interpretations where problems.md leaves a detail open:
- "n/4" and "3n/4" are k = n // 4 and n - k, so the last k columns / eigenvalues are the
  special ones and n < 4 has none;
- band width w = max(2, min(32, n // 32)); eigh repeated: value i of linspace(-1, 1, g) is
  used for indices with floor(i * g / n) == i, exactly n/g times when g divides n;
- eigh clustered: the outer two thirds are random-sign 1 + 1e-5 N(0,1), the middle third
  (indices n//3 .. 2n//3 - 1) is 1 + 1e-6 N(0,1);
- lapack: the planted and diagonal spectra all get random signs; the clustered spectrum is
  (1, ulp, ..., ulp); random symmetric mirrors the lower triangle of a uniform(-1, 1) draw so
  every entry stays uniform; a band matrix's bandwidth is uniform in 1 .. n-1 per matrix.
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from checks.problems import DEFAULT_CASE, ProblemError, normalize_spec

EPS = 2.0 ** -23                                   # float32 machine epsilon
ULP = 2 * EPS                                      # LAPACK's ulp (eps * base)
HIGH = math.sqrt(torch.finfo(torch.float32).max)   # ~1.8e19: squares just fit in float32
LOW = math.sqrt(torch.finfo(torch.float32).tiny)   # ~1.1e-19: squares just stay normal
BENCH_BYTES = 256 * 2 ** 20                        # the grader's benchmark input budget


class Draw:
    """The random source of one generate() call: one seeded generator on the target device."""

    def __init__(self, seed: int, device="cpu"):
        self.device = torch.device(device)
        self.gen = torch.Generator(device=self.device)
        self.gen.manual_seed(seed)

    def normal(self, *shape) -> torch.Tensor:
        # drawn in float32 like the official A0, then widened for the arithmetic
        return torch.randn(shape, generator=self.gen, device=self.device).double()

    def uniform(self, *shape) -> torch.Tensor:
        """Uniform(-1, 1)."""
        return torch.rand(shape, generator=self.gen, device=self.device).double() * 2 - 1

    def signs(self, *shape) -> torch.Tensor:
        return torch.randint(0, 2, shape, generator=self.gen, device=self.device).double() * 2 - 1

    def integers(self, low: int, high: int, *shape) -> torch.Tensor:
        return torch.randint(low, high, shape, generator=self.gen, device=self.device)

    def choice(self, weights: list[float], count: int) -> list[int]:
        w = torch.tensor(weights, dtype=torch.float64, device=self.device)
        return torch.multinomial(w, count, replacement=True, generator=self.gen).tolist()

    # vectors of the arithmetic, on the same device
    def logspace(self, start: float, end: float, steps: int) -> torch.Tensor:
        return torch.logspace(start, end, steps, dtype=torch.float64, device=self.device)

    def linspace(self, start: float, end: float, steps: int) -> torch.Tensor:
        return torch.linspace(start, end, steps, dtype=torch.float64, device=self.device)


# ---------------------------------------------------------------- shared helpers

def _sym(A: torch.Tensor) -> torch.Tensor:
    return (A + A.mT) / 2


def _scale_cols(A: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    return A * d


def _scale_rows(A: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    return A * d[:, None]


def _col_scaling(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Column j times 10^(-cond j/(n-1)); cond 0 multiplies by exactly 1."""
    return _scale_cols(A, r.logspace(0, -cond, A.shape[-1]))


def _diag(values: torch.Tensor, b: int) -> torch.Tensor:
    """A batch of diagonal matrices; values is (n,) or (b, n)."""
    return torch.diag_embed(values.expand(b, -1))


def _add_diag(A: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    return A + torch.diag_embed(values.expand(A.shape[0], -1))


def _band_mask(r: Draw, n: int, width) -> torch.Tensor:
    """|i - j| <= width; width an int or a (b,) tensor (one width per matrix)."""
    i = torch.arange(n, device=r.device)
    dist = (i[:, None] - i[None, :]).abs()
    if isinstance(width, torch.Tensor):
        return dist <= width[:, None, None]
    return dist <= width


def _band_width(n: int) -> int:
    return max(2, min(32, n // 32))


def _orthogonal(r: Draw, b: int, n: int) -> torch.Tensor:
    """Q of the QR of a gaussian, column signs fixed by diag(R): Haar-distributed."""
    Q, R = torch.linalg.qr(r.normal(b, n, n))
    signs = torch.where(R.diagonal(dim1=-2, dim2=-1) < 0, -1.0, 1.0)
    return Q * signs[:, None, :]


def _planted(r: Draw, b: int, values: torch.Tensor) -> torch.Tensor:
    """Q diag(values) Q^T with a random orthogonal Q per matrix; values is (n,) or (b, n)."""
    n = values.shape[-1]
    Q = _orthogonal(r, b, n)
    return (Q * values.expand(b, n)[:, None, :]) @ Q.mT


def _signed_logspace(r: Draw, n: int, cond: int) -> torch.Tensor:
    """logspace(-max(cond,1), 0, n) with the even indices negated (eigh spectrum/diagonal)."""
    v = r.logspace(-max(cond, 1), 0, n)
    v[0::2] *= -1
    return v


def _low_rank_split(n: int) -> tuple[int, int]:
    """(k, n - k): k = n // 4 special columns or eigenvalues at the end."""
    k = n // 4
    return k, n - k


# ---------------------------------------------------------------- qr_v2 families

def qr_dense(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """A0 with column scaling."""
    return _col_scaling(r, r.normal(b, n, n), cond)


def qr_upper(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Upper triangular: triu(A0) + diag(linspace(1, 0.25)), column scaling."""
    A = _add_diag(torch.triu(r.normal(b, n, n)), r.linspace(1, 0.25, n))
    return _col_scaling(r, A, cond)


def qr_diagonal(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Diagonal: random signs times logspace(0, -max(cond, 2), n)."""
    return _diag(r.signs(b, n) * r.logspace(0, -max(cond, 2), n), b)


def qr_rankdef(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Rank n - n//4: the last n//4 columns are zero."""
    k, m = _low_rank_split(n)
    A = r.normal(b, n, n)
    A[..., m:] = 0
    return _col_scaling(r, A, cond)


def qr_nearrank(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Nearly rank n - n//4: the last n//4 columns copy the first ones plus 1e-5 noise."""
    k, m = _low_rank_split(n)
    A = r.normal(b, n, n)
    A[..., m:] = A[..., :k] + 1e-5 * r.normal(b, n, k)
    return _col_scaling(r, A, cond)


def qr_clustered(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Column scales 1 (first half), 4 eps (second half), sqrt(eps) (four columns around n/2)."""
    h = n // 2
    d = torch.ones(n, dtype=torch.float64, device=r.device)
    d[h:] = 4 * EPS
    d[max(0, h - 2):h + 2] = math.sqrt(EPS)
    return _scale_cols(r.normal(b, n, n), d)


def qr_band(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Zero outside |i-j| <= max(2, min(32, n/32)), diagonal += linspace(1, 0.5), column scaling."""
    A = r.normal(b, n, n) * _band_mask(r, n, _band_width(n))
    return _col_scaling(r, _add_diag(A, r.linspace(1, 0.5, n)), cond)


def qr_nearcollinear(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Every column = one shared random vector + 1e-4 noise, column scaling."""
    shared = r.normal(b, n, 1)
    return _col_scaling(r, shared + 1e-4 * r.normal(b, n, n), cond)


def qr_rowscale(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Row i of A0 times 10^(-max(cond,4) i/(n-1))."""
    return _scale_rows(r.normal(b, n, n), r.logspace(0, -max(cond, 4), n))


# ---------------------------------------------------------------- eigh families

def eigh_dense(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """sym(A0), two-sided scaled D A D with D = logspace(0, -cond, n)."""
    d = r.logspace(0, -cond, n)
    return _scale_rows(_scale_cols(_sym(r.normal(b, n, n)), d), d)


def eigh_spectrum(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Planted eigenvalues logspace(-max(cond,1), 0, n), even indices negative."""
    return _planted(r, b, _signed_logspace(r, n, cond))


def eigh_psd(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Positive semidefinite G G^T / n, G = A0 diag(logspace(0, -max(cond,1), n))."""
    G = _scale_cols(r.normal(b, n, n), r.logspace(0, -max(cond, 1), n))
    return G @ G.mT / n


def eigh_rankdef(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Planted: n//4 zero eigenvalues, the rest logspace(-max(cond,1), 0)."""
    k, m = _low_rank_split(n)
    zeros = torch.zeros(k, dtype=torch.float64, device=r.device)
    return _planted(r, b, torch.cat([zeros, r.logspace(-max(cond, 1), 0, m)]))


def eigh_nearrank(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Planted: n//4 eigenvalues 1e-6 logspace(-2, 0), the rest logspace(-max(cond,1), 0)."""
    k, m = _low_rank_split(n)
    tiny = 1e-6 * r.logspace(-2, 0, k)
    return _planted(r, b, torch.cat([tiny, r.logspace(-max(cond, 1), 0, m)]))


def eigh_repeated(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Planted: g = max(1, min(16, n/8)) distinct values linspace(-1, 1, g), each n/g times."""
    g = max(1, min(16, n // 8))
    which = torch.arange(n, device=r.device) * g // n
    return _planted(r, b, r.linspace(-1, 1, g)[which])


def eigh_clustered(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Planted: random-sign 1 + 1e-5 jitter, the middle third 1 + 1e-6 jitter (two tight clusters)."""
    values = r.signs(b, n) * (1 + 1e-5 * r.normal(b, n))
    third = slice(n // 3, 2 * n // 3)
    values[:, third] = 1 + 1e-6 * r.normal(b, third.stop - third.start)
    return _planted(r, b, values)


def eigh_diagonal(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """Diagonal of the signed logspace of `spectrum`."""
    return _diag(_signed_logspace(r, n, cond), b)


def eigh_band(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """sym(A0) zero outside |i-j| <= max(2, min(32, n/32)), diagonal += linspace(-1, 1)."""
    A = _sym(r.normal(b, n, n)) * _band_mask(r, n, _band_width(n))
    return _add_diag(A, r.linspace(-1, 1, n))


def eigh_rowscale(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """D sym(A0) D with D = logspace(0, -max(cond,4), n)."""
    d = r.logspace(0, -max(cond, 4), n)
    return _scale_rows(_scale_cols(_sym(r.normal(b, n, n)), d), d)


# ---------------------------------------------------------------- eigh: LAPACK's test matrix types

def _lapack_spectrum(r: Draw, b: int, n: int, kind: str) -> torch.Tensor:
    """(b, n) random-sign eigenvalues in [ulp, 1]: even, geometric or clustered (one 1, rest ulp)."""
    if kind == "even":
        v = r.linspace(1, ULP, n)
    elif kind == "geometric":
        v = r.logspace(0, math.log10(ULP), n)
    else:
        v = torch.full((n,), ULP, dtype=torch.float64, device=r.device)
        v[0] = 1
    return r.signs(b, n) * v


def lapack_zero(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """The zero matrix."""
    return torch.zeros(b, n, n, dtype=torch.float64, device=r.device)


def lapack_identity(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """The identity."""
    return torch.eye(n, dtype=torch.float64, device=r.device).expand(b, n, n).clone()


def lapack_diag(r: Draw, b: int, n: int, spectrum: str, scale: float) -> torch.Tensor:
    """Diagonal; a random-sign LAPACK spectrum, times scale."""
    return scale * _diag(_lapack_spectrum(r, b, n, spectrum), b)


def lapack_dense(r: Draw, b: int, n: int, spectrum: str, scale: float) -> torch.Tensor:
    """Planted; a random-sign LAPACK spectrum, times scale."""
    return scale * _planted(r, b, _lapack_spectrum(r, b, n, spectrum))


def lapack_band(r: Draw, b: int, n: int, spectrum: str, scale: float) -> torch.Tensor:
    """Planted, masked to a random bandwidth per matrix; a LAPACK spectrum, times scale."""
    A = _planted(r, b, _lapack_spectrum(r, b, n, spectrum))
    width = r.integers(min(1, n - 1), n, b)
    return scale * A * _band_mask(r, n, width)


def lapack_random(r: Draw, b: int, n: int, spectrum: str, scale: float) -> torch.Tensor:
    """Symmetric with uniform(-1, 1) entries (lower triangle mirrored); times scale."""
    L = torch.tril(r.uniform(b, n, n))
    return scale * (L + torch.tril(L, -1).mT)


_MAGNITUDE_WORDS = {1.0: "", HIGH: ", times sqrt(float32 max)", LOW: ", times sqrt(float32 tiny)"}


def _variant(base: Callable, spectrum: str | None, scale: float) -> Callable:
    """A family (r, b, n, cond) from a LAPACK base generator with its spectrum and scale fixed."""
    def family(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
        return base(r, b, n, spectrum, scale)
    what = f", {spectrum} spectrum" if spectrum else ""
    family.__doc__ = f"{base.__doc__.split(';')[0]}{what}{_MAGNITUDE_WORDS[scale]}."
    family.__name__ = base.__name__
    return family


# The LAPACK types by the names the case list uses, plus the diagonal magnitudes it leaves out.
LAPACK_TYPES: dict[str, tuple[Callable, str | None, float]] = {
    "lapack_diag_even_spectrum": (lapack_diag, "even", 1.0),
    "lapack_diag_geometric_spectrum": (lapack_diag, "geometric", 1.0),
    "lapack_diag_clustered_spectrum": (lapack_diag, "clustered", 1.0),
    "lapack_diag_even_high_magnitude": (lapack_diag, "even", HIGH),
    "lapack_diag_even_low_magnitude": (lapack_diag, "even", LOW),
    "lapack_diag_geometric_high_magnitude": (lapack_diag, "geometric", HIGH),
    "lapack_diag_geometric_low_magnitude": (lapack_diag, "geometric", LOW),
    "lapack_diag_clustered_high_magnitude": (lapack_diag, "clustered", HIGH),
    "lapack_diag_clustered_low_magnitude": (lapack_diag, "clustered", LOW),
    "lapack_dense_even_spectrum": (lapack_dense, "even", 1.0),
    "lapack_dense_geometric_spectrum": (lapack_dense, "geometric", 1.0),
    "lapack_dense_clustered_spectrum": (lapack_dense, "clustered", 1.0),
    "lapack_dense_even_high_magnitude": (lapack_dense, "even", HIGH),
    "lapack_dense_even_low_magnitude": (lapack_dense, "even", LOW),
    "lapack_random_symmetric": (lapack_random, None, 1.0),
    "lapack_random_symmetric_high_magnitude": (lapack_random, None, HIGH),
    "lapack_random_symmetric_low_magnitude": (lapack_random, None, LOW),
    "lapack_band_even_spectrum": (lapack_band, "even", 1.0),
    "lapack_band_even_high_magnitude": (lapack_band, "even", HIGH),
    "lapack_band_even_low_magnitude": (lapack_band, "even", LOW),
}


# ---------------------------------------------------------------- mixed batches

MIXED_WEIGHTS = {
    "qr_v2": {"dense": 6, "rankdef": 1, "nearrank": 1, "clustered": 1, "band": 1,
              "rowscale": 1, "nearcollinear": 1},
    "eigh": {"dense": 6, "spectrum": 1, "psd": 2, "rankdef": 1, "nearrank": 1, "repeated": 1,
             "clustered": 1, "band": 1, "rowscale": 1},
}


def _choose_profiles(r: Draw, problem: str, b: int) -> list[str]:
    """Profiles by weight at random positions; a batch >= 2 gets >= 1 dense and >= 1 other."""
    names = list(MIXED_WEIGHTS[problem])   # "dense" first
    weights = list(MIXED_WEIGHTS[problem].values())
    picks = r.choice(weights, b)
    if b >= 2:
        # drawn unconditionally so the stream after this point never depends on the branch
        pos = int(r.integers(0, b, 1))
        other = 1 + r.choice(weights[1:], 1)[0]
        if 0 not in picks:
            picks[pos] = 0
        elif all(p == 0 for p in picks):
            picks[pos] = other
    return [names[p] for p in picks]


def _mixed(problem: str) -> Callable:
    def mixed(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
        profiles = _choose_profiles(r, problem, b)
        A = torch.empty(b, n, n, dtype=torch.float64, device=r.device)
        for name in MIXED_WEIGHTS[problem]:   # a fixed order keeps the draws deterministic
            rows = [i for i, p in enumerate(profiles) if p == name]
            if rows:
                A[rows] = FAMILIES[problem][name](r, len(rows), n, cond)
        return A
    mixed.__doc__ = f"Each matrix a random {problem} profile by weight, at least one dense and one not."
    return mixed


# ---------------------------------------------------------------- the public API

FAMILIES: dict[str, dict[str, Callable]] = {
    "qr_v2": {
        "dense": qr_dense, "upper": qr_upper, "diagonal": qr_diagonal, "rankdef": qr_rankdef,
        "nearrank": qr_nearrank, "clustered": qr_clustered, "band": qr_band,
        "nearcollinear": qr_nearcollinear, "rowscale": qr_rowscale, "mixed": _mixed("qr_v2"),
    },
    "eigh": {
        "dense": eigh_dense, "spectrum": eigh_spectrum, "psd": eigh_psd, "rankdef": eigh_rankdef,
        "nearrank": eigh_nearrank, "repeated": eigh_repeated, "clustered": eigh_clustered,
        "diagonal": eigh_diagonal, "band": eigh_band, "rowscale": eigh_rowscale,
        "mixed": _mixed("eigh"),
        "lapack_zero": lapack_zero, "lapack_identity": lapack_identity,
        **{name: _variant(*args) for name, args in LAPACK_TYPES.items()},
    },
}


def families(problem: str) -> list[str]:
    """The case family names of a problem."""
    if problem not in FAMILIES:
        raise ProblemError(f"no generators for problem {problem!r} (known: {', '.join(FAMILIES)})")
    return list(FAMILIES[problem])


def _family(problem: str, case: str) -> Callable:
    known = families(problem)
    if case not in FAMILIES[problem]:
        raise ProblemError(f"unknown {problem} case family {case!r} (known: {', '.join(known)})")
    return FAMILIES[problem][case]


def _spec(problem: str, spec: dict) -> dict:
    return normalize_spec(spec, DEFAULT_CASE.get(problem, "dense"))


def generate(problem: str, spec: dict, device="cpu") -> torch.Tensor:
    """The contiguous batch x n x n float32 input of one case; deterministic per spec and device."""
    spec = _spec(problem, spec)
    family = _family(problem, spec["case"])
    A = family(Draw(spec["seed"], device), spec["batch"], spec["n"], spec["cond"])
    if problem == "eigh":
        A = _sym(A)   # in float64: the float32 cast of a symmetric matrix is exactly symmetric
    return A.to(torch.float32).contiguous()


def mixed_profiles(problem: str, spec: dict, device="cpu") -> list[str]:
    """The profile of each matrix of generate(problem, spec, device): the case name unless mixed."""
    spec = _spec(problem, spec)
    _family(problem, spec["case"])
    if spec["case"] != "mixed":
        return [spec["case"]] * spec["batch"]
    # the profile choice is the first draw of a mixed case, so replaying it needs no matrices
    return _choose_profiles(Draw(spec["seed"], device), problem, spec["batch"])


def benchmark_count(spec: dict) -> int:
    """How many inputs the grader times per case: 256 MiB of float32 input, 1 .. 50."""
    return max(1, min(50, BENCH_BYTES // (4 * spec["batch"] * spec["n"] ** 2)))


def benchmark_inputs(problem: str, spec: dict, device="cpu") -> list[torch.Tensor]:
    """The grader's benchmark inputs of a case: input i has seed spec seed + 42 (i + 1)."""
    spec = _spec(problem, spec)
    return [generate(problem, {**spec, "seed": spec["seed"] + 42 * (i + 1)}, device)
            for i in range(benchmark_count(spec))]
