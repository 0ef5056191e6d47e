"""Input generators: every case family of qr_v2 and eigh, as the official generators build them.

generate(problem, spec) returns the batch x n x n float32 input of one case; the same spec
gives the same tensor on the same device. The construction follows the official reference
generators step by step (docs/harness-agreement.md lists the facts and where they come from):

- one torch.Generator on the target device, seeded with the case seed, is the only random source;
- every qr_v2 case and every eigh case except the lapack_* types first draws the base
  A0 = randn(batch, n, n) (float32), even where the family then discards it (qr diagonal and
  nearcollinear, the planted eigh spectra); the family's own draws come after it, in order;
- the arithmetic is float32 in the official order of operations (e.g. two-sided scaling is
  (d_i a_ij) d_j), and every non-LAPACK eigh family ends with (A + A^T)/2, so with the same
  torch build and device the result is the official input bit for bit;
- a mixed batch draws its profiles (multinomial over float32 weights) after A0, applies each
  profile in a fixed order to the sub-batch of A0 rows that drew it, and a profile's own draws
  are made for that sub-batch as a whole.

A family is `family(draw, b, n, cond) -> float32 (b, n, n)`; the building blocks of the
non-LAPACK families act on a given base: `apply(draw, A0, cond)`.
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from checks.problems import DEFAULT_CASE, ProblemError, normalize_spec

F32 = torch.float32
EPS = 2.0 ** -23                                   # float32 machine epsilon
ULP = 2 * EPS                                      # LAPACK's ulp (eps * base)
HIGH = torch.finfo(F32).max ** 0.5                 # ~1.8e19: squares just fit in float32
LOW = torch.finfo(F32).tiny ** 0.5                 # ~1.1e-19: squares just stay normal
BENCH_BYTES = 256 * 2 ** 20                        # the grader's benchmark input budget


class Draw:
    """The random source of one generate() call: one seeded generator on the target device."""

    def __init__(self, seed: int, device="cpu"):
        self.device = torch.device(device)
        self.gen = torch.Generator(device=self.device)
        self.gen.manual_seed(seed)

    def normal(self, *shape) -> torch.Tensor:
        return torch.randn(shape, generator=self.gen, device=self.device, dtype=F32)

    def uniform(self, *shape) -> torch.Tensor:
        """Uniform(-1, 1), drawn by uniform_ on an empty float32 tensor."""
        return torch.empty(shape, device=self.device, dtype=F32).uniform_(-1.0, 1.0, generator=self.gen)

    def signs(self, *shape) -> torch.Tensor:
        """+-1 from randint(0, 2) (int64), as float32."""
        bits = torch.randint(0, 2, shape, generator=self.gen, device=self.device, dtype=torch.int64)
        return bits.to(F32).mul_(2.0).sub_(1.0)

    def integers(self, low: int, high: int, *shape) -> torch.Tensor:
        return torch.randint(low, high, shape, generator=self.gen, device=self.device)

    def choice(self, weights: list[float], count: int) -> list[int]:
        w = torch.tensor([float(x) for x in weights], dtype=F32, device=self.device)
        return torch.multinomial(w, count, replacement=True, generator=self.gen).tolist()

    # vectors of the arithmetic, float32 on the same device
    def logspace(self, start: float, end: float, steps: int) -> torch.Tensor:
        return torch.logspace(float(start), float(end), steps, dtype=F32, device=self.device)

    def linspace(self, start: float, end: float, steps: int) -> torch.Tensor:
        return torch.linspace(float(start), float(end), steps, dtype=F32, device=self.device)


# ---------------------------------------------------------------- shared helpers

def _sym(A: torch.Tensor) -> torch.Tensor:
    """0.5 (A + A^T): exactly symmetric in float32, since a + b == b + a."""
    return 0.5 * (A + A.mT)


def _col_scaling(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Column j times 10^(-cond j/(n-1)) (a float32 logspace); cond 0 leaves A untouched."""
    return A * r.logspace(0, -cond, A.shape[-1]) if cond else A


def _two_sided(d: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """D S D evaluated as (d_i s_ij) d_j, rows first."""
    return d[:, None] * S * d


def _band_mask(r: Draw, n: int, width) -> torch.Tensor:
    """|i - j| <= width; width an int or a (b,) tensor (one width per matrix)."""
    i = torch.arange(n, device=r.device)
    dist = (i[:, None] - i[None, :]).abs()
    if isinstance(width, torch.Tensor):
        return dist[None] <= width[:, None, None]
    return dist <= width


def _band_width(n: int) -> int:
    return max(2, min(32, n // 32))


def _rank(n: int) -> int:
    """The kept rank of the rank-deficient families: max(1, 3n // 4); the other n - rank are special."""
    return max(1, (3 * n) // 4)


def _orthogonal(r: Draw, b: int, n: int) -> torch.Tensor:
    """Q of the float32 QR of a fresh gaussian, column j negated unless R_jj > 0."""
    Q, R = torch.linalg.qr(r.normal(b, n, n))
    signs = torch.where(R.diagonal(dim1=-2, dim2=-1) > 0, 1.0, -1.0).to(F32)
    return Q * signs[:, None, :]


def _planted(r: Draw, values: torch.Tensor) -> torch.Tensor:
    """sym(Q diag(values) Q^T) with a random orthogonal Q per matrix; values is (b, n)."""
    b, n = values.shape
    Q = _orthogonal(r, b, n)
    return _sym((Q * values[:, None, :]) @ Q.mT)


def _signed_logspace(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """(b, n): logspace(-max(cond,1), 0, n) with the even indices negated (eigh spectrum/diagonal)."""
    signs = torch.ones(n, dtype=F32, device=r.device)
    signs[0::2] = -1.0
    return (r.logspace(-max(cond, 1), 0, n) * signs).expand(b, n).contiguous()


# ---------------------------------------------------------------- qr_v2: profiles on a base A0

def qr_dense(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """A0 with column scaling."""
    return _col_scaling(r, A, cond)


def qr_upper(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Upper triangular: triu(A0), diagonal += linspace(1, 0.25), column scaling."""
    A = torch.triu(A)
    A.diagonal(dim1=-2, dim2=-1).add_(r.linspace(1, 0.25, A.shape[-1]))
    return _col_scaling(r, A, cond)


def qr_diagonal(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Diagonal (A0 discarded): sign of a fresh normal draw (+1 if > 0, else -1) times logspace(0, -max(cond, 2), n)."""
    m, n = A.shape[0], A.shape[-1]
    signs = torch.where(r.normal(m, n) > 0, 1.0, -1.0).to(F32)
    return torch.diag_embed(signs * r.logspace(0, -max(cond, 2), n))


def qr_rankdef(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Rank max(1, 3n//4): the columns from there on are zero, column scaling."""
    A[..., _rank(A.shape[-1]):] = 0.0
    return _col_scaling(r, A, cond)


def qr_nearrank(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Nearly rank max(1, 3n//4): the columns from there on copy the first ones plus 1e-5 noise."""
    m, n = A.shape[0], A.shape[-1]
    rank = _rank(n)
    tail = n - rank
    if tail > 0:
        A[..., rank:] = A[..., :tail] + 1e-5 * r.normal(m, n, tail)
    return _col_scaling(r, A, cond)


def qr_clustered(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Column scales 1 (first half), 4 eps (second half), sqrt(eps) (columns n/2-2 .. n/2+1, n >= 8 only)."""
    n = A.shape[-1]
    d = torch.ones(n, dtype=F32, device=r.device)
    d[n // 2:] = 4 * EPS
    if n >= 8:
        d[max(0, n // 2 - 2):min(n, n // 2 + 2)] = torch.sqrt(torch.tensor(EPS, dtype=F32, device=r.device))
    return A * d


def qr_band(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Zero outside |i-j| <= max(2, min(32, n/32)), diagonal += linspace(1, 0.5), column scaling."""
    n = A.shape[-1]
    A = A * _band_mask(r, n, _band_width(n))
    A.diagonal(dim1=-2, dim2=-1).add_(r.linspace(1, 0.5, n))
    return _col_scaling(r, A, cond)


def qr_nearcollinear(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Every column = one shared fresh random vector + 1e-4 fresh noise (A0 discarded), column scaling."""
    m, n = A.shape[0], A.shape[-1]
    shared = r.normal(m, n, 1)
    noise = r.normal(m, n, n)
    return _col_scaling(r, shared.expand(m, n, n) + 1e-4 * noise, cond)


def qr_rowscale(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Row i of A0 times 10^(-max(cond,4) i/(n-1))."""
    return r.logspace(0, -max(cond, 4), A.shape[-1])[:, None] * A


# ---------------------------------------------------------------- eigh: profiles on a base A0
# Each returns the matrix before the final symmetrization, which every one of them gets.

def eigh_dense(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """sym(A0); for cond > 0 two-sided scaled D A D with D = logspace(0, -cond, n)."""
    S = _sym(A)
    return _two_sided(r.logspace(0, -cond, A.shape[-1]), S) if cond else S


def eigh_spectrum(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Planted eigenvalues logspace(-max(cond,1), 0, n), even indices negative (A0 discarded)."""
    return _planted(r, _signed_logspace(r, A.shape[0], A.shape[-1], cond))


def eigh_psd(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Positive semidefinite G G^T / n, G = A0 diag(logspace(0, -max(cond,1), n))."""
    n = A.shape[-1]
    G = A * r.logspace(0, -max(cond, 1), n)
    return (G @ G.mT) / float(n)


def eigh_rankdef(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Planted: n - max(1, 3n//4) zero eigenvalues, then logspace(-max(cond,1), 0, max(1, 3n//4))."""
    m, n = A.shape[0], A.shape[-1]
    rank = _rank(n)
    values = torch.zeros(m, n, dtype=F32, device=r.device)
    values[:, n - rank:] = r.logspace(-max(cond, 1), 0, rank)
    return _planted(r, values)


def eigh_nearrank(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Planted: n - rank eigenvalues 1e-6 logspace(-2, 0), then logspace(-max(cond,1), 0, rank); rank max(1, 3n//4)."""
    m, n = A.shape[0], A.shape[-1]
    rank = _rank(n)
    values = torch.empty(m, n, dtype=F32, device=r.device)
    values[:, :n - rank] = 1e-6 * r.logspace(-2, 0, n - rank)
    values[:, n - rank:] = r.logspace(-max(cond, 1), 0, rank)
    return _planted(r, values)


def eigh_repeated(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Planted: g = max(1, min(16, n/8)) values linspace(-1, 1, g), each ceil(n/g) times, cut to n."""
    m, n = A.shape[0], A.shape[-1]
    g = max(1, min(16, n // 8))
    values = r.linspace(-1, 1, g).repeat_interleave(-(-n // g))[:n]
    return _planted(r, values.expand(m, n).contiguous())


def eigh_clustered(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Planted, deterministic: t = linspace(-1, 1, n); +-1 (sign of t, 0 counts as -1) + 1e-5 t,
    the middle third (n//3 .. 2n//3 - 1) 1 + 1e-6 t instead; sorted ascending."""
    m, n = A.shape[0], A.shape[-1]
    t = r.linspace(-1, 1, n)
    values = torch.where(t > 0, 1.0, -1.0).to(F32) + 1e-5 * t
    values[n // 3:2 * n // 3] = 1.0 + 1e-6 * t[n // 3:2 * n // 3]
    return _planted(r, values.sort().values.expand(m, n).contiguous())


def eigh_diagonal(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Diagonal of the signed logspace of `spectrum` (A0 discarded)."""
    return torch.diag_embed(_signed_logspace(r, A.shape[0], A.shape[-1], cond))


def eigh_band(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """sym(A0) zero outside |i-j| <= max(2, min(32, n/32)), diagonal += linspace(-1, 1)."""
    n = A.shape[-1]
    S = _sym(A) * _band_mask(r, n, _band_width(n))
    S.diagonal(dim1=-2, dim2=-1).add_(r.linspace(-1, 1, n))
    return S


def eigh_rowscale(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """D sym(A0) D with D = logspace(0, -max(cond,4), n)."""
    return _two_sided(r.logspace(0, -max(cond, 4), A.shape[-1]), _sym(A))


# ---------------------------------------------------------------- eigh: LAPACK's test matrix types
# These draw no A0; the random draws are the spectrum's signs, then Q, then (band) the widths.

def _lapack_spectrum(r: Draw, b: int, n: int, kind: str) -> torch.Tensor:
    """(b, n) random-sign eigenvalues in [ulp, 1]: even, geometric or clustered (one 1, rest ulp); n = 1 gives 1."""
    if n == 1:
        v = torch.ones(1, dtype=F32, device=r.device)
    elif kind == "even":
        v = r.linspace(1, ULP, n)
    elif kind == "geometric":
        v = r.logspace(0, math.log10(ULP), n)
    else:
        v = torch.full((n,), ULP, dtype=F32, device=r.device)
        v[0] = 1.0
    return v.expand(b, n) * r.signs(b, n)


def lapack_zero(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """The zero matrix."""
    return torch.zeros(b, n, n, dtype=F32, device=r.device)


def lapack_identity(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
    """The identity."""
    return torch.eye(n, dtype=F32, device=r.device).expand(b, n, n).clone()


def lapack_diag(r: Draw, b: int, n: int, spectrum: str, scale: float) -> torch.Tensor:
    """Diagonal; a random-sign LAPACK spectrum, times scale."""
    return torch.diag_embed(_lapack_spectrum(r, b, n, spectrum) * scale)


def lapack_dense(r: Draw, b: int, n: int, spectrum: str, scale: float) -> torch.Tensor:
    """Planted; a random-sign LAPACK spectrum, times scale (the values are scaled, then planted)."""
    return _planted(r, _lapack_spectrum(r, b, n, spectrum) * scale)


def lapack_band(r: Draw, b: int, n: int, spectrum: str, scale: float) -> torch.Tensor:
    """Planted, masked to a random bandwidth per matrix (uniform in 0 .. n-1); a LAPACK spectrum, times scale."""
    A = _planted(r, _lapack_spectrum(r, b, n, spectrum) * scale)
    width = r.integers(0, n, b)
    return A * _band_mask(r, n, width)


def lapack_random(r: Draw, b: int, n: int, spectrum: str, scale: float) -> torch.Tensor:
    """Symmetrized uniform(-1, 1): 0.5 (U + U^T); times scale."""
    return _sym(r.uniform(b, n, n)) * scale


_MAGNITUDE_WORDS = {1.0: "", HIGH: ", times sqrt(float32 max)", LOW: ", times sqrt(float32 tiny)"}


def _variant(base: Callable, spectrum: str | None, scale: float) -> Callable:
    """A family (r, b, n, cond) from a LAPACK base generator with its spectrum and scale fixed."""
    def family(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
        return base(r, b, n, spectrum, scale)
    what = f", {spectrum} spectrum" if spectrum else ""
    family.__doc__ = f"{base.__doc__.split(';')[0]}{what}{_MAGNITUDE_WORDS[scale]}."
    family.__name__ = base.__name__
    return family


# The LAPACK types by the names the case list uses, plus the diagonal magnitudes it leaves out
# (lapack_diag_even_*_magnitude, lapack_diag_clustered_*_magnitude: ours, not official).
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


# ---------------------------------------------------------------- profiles and mixed batches

PROFILES: dict[str, dict[str, Callable]] = {
    "qr_v2": {
        "dense": qr_dense, "upper": qr_upper, "diagonal": qr_diagonal, "rankdef": qr_rankdef,
        "nearrank": qr_nearrank, "clustered": qr_clustered, "band": qr_band,
        "nearcollinear": qr_nearcollinear, "rowscale": qr_rowscale,
    },
    "eigh": {
        "dense": eigh_dense, "spectrum": eigh_spectrum, "psd": eigh_psd, "rankdef": eigh_rankdef,
        "nearrank": eigh_nearrank, "repeated": eigh_repeated, "clustered": eigh_clustered,
        "diagonal": eigh_diagonal, "band": eigh_band, "rowscale": eigh_rowscale,
    },
}

MIXED_WEIGHTS = {
    "qr_v2": {"dense": 6, "rankdef": 1, "nearrank": 1, "clustered": 1, "band": 1,
              "rowscale": 1, "nearcollinear": 1},
    "eigh": {"dense": 6, "spectrum": 1, "psd": 2, "rankdef": 1, "nearrank": 1, "repeated": 1,
             "clustered": 1, "band": 1, "rowscale": 1},
}


def _apply(problem: str, name: str, r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
    """Profile `name` on the base A; an eigh profile ends symmetrized."""
    out = PROFILES[problem][name](r, A, cond)
    return _sym(out) if problem == "eigh" else out


def _choose_profiles(r: Draw, problem: str, b: int) -> list[str]:
    """Profiles by weight at random positions; a batch >= 2 gets >= 1 dense and >= 1 other.

    The repair draws only when needed: no dense -> a uniform position becomes dense; all
    dense -> a uniform position gets a non-dense profile chosen uniformly (not by weight).
    """
    names = list(MIXED_WEIGHTS[problem])   # "dense" first
    picks = r.choice(list(MIXED_WEIGHTS[problem].values()), b)
    if b >= 2:
        if 0 not in picks:
            picks[int(r.integers(0, b, 1))] = 0
        elif all(p == 0 for p in picks):
            pos = int(r.integers(0, b, 1))
            picks[pos] = int(r.integers(1, len(names), 1))
    return [names[p] for p in picks]


def _mixed(problem: str) -> Callable:
    def mixed(r: Draw, A: torch.Tensor, cond: int) -> torch.Tensor:
        profiles = _choose_profiles(r, problem, A.shape[0])
        for name in MIXED_WEIGHTS[problem]:   # a fixed order keeps the draws deterministic
            rows = torch.tensor([p == name for p in profiles], device=A.device)
            if bool(rows.any()):
                A[rows] = _apply(problem, name, r, A[rows], cond)
        return A
    mixed.__doc__ = (f"Each matrix of A0 a random {problem} profile by weight (at least one dense and one "
                     "not), each profile applied to its rows as one sub-batch.")
    return mixed


def _on_base(problem: str, name: str) -> Callable:
    """The family (r, b, n, cond) of a profile: draw A0, apply the profile."""
    def family(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
        return _apply(problem, name, r, r.normal(b, n, n), cond)
    family.__doc__ = PROFILES[problem][name].__doc__
    family.__name__ = PROFILES[problem][name].__name__
    return family


def _mixed_family(problem: str) -> Callable:
    apply = _mixed(problem)

    def family(r: Draw, b: int, n: int, cond: int) -> torch.Tensor:
        return apply(r, r.normal(b, n, n), cond)
    family.__doc__ = apply.__doc__
    family.__name__ = "mixed"
    return family


# ---------------------------------------------------------------- the public API

FAMILIES: dict[str, dict[str, Callable]] = {
    "qr_v2": {**{name: _on_base("qr_v2", name) for name in PROFILES["qr_v2"]},
              "mixed": _mixed_family("qr_v2")},
    "eigh": {**{name: _on_base("eigh", name) for name in PROFILES["eigh"]},
             "mixed": _mixed_family("eigh"),
             "lapack_zero": lapack_zero, "lapack_identity": lapack_identity,
             **{name: _variant(*args) for name, args in LAPACK_TYPES.items()}},
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
    return A.to(F32).contiguous()


def mixed_profiles(problem: str, spec: dict, device="cpu") -> list[str]:
    """The profile of each matrix of generate(problem, spec, device): the case name unless mixed."""
    spec = _spec(problem, spec)
    _family(problem, spec["case"])
    if spec["case"] != "mixed":
        return [spec["case"]] * spec["batch"]
    # the profiles are the first draw after A0, so replaying them needs A0's draw but no profile work
    r = Draw(spec["seed"], device)
    r.normal(spec["batch"], spec["n"], spec["n"])
    return _choose_profiles(r, problem, spec["batch"])


def benchmark_count(spec: dict) -> int:
    """How many inputs the grader times per case: 256 MiB of float32 input, 1 .. 50."""
    return max(1, min(50, BENCH_BYTES // (4 * spec["batch"] * spec["n"] ** 2)))


def benchmark_inputs(problem: str, spec: dict, device="cpu") -> list[torch.Tensor]:
    """The grader's benchmark inputs of a case: input i has seed spec seed + 42 (i + 1)."""
    spec = _spec(problem, spec)
    return [generate(problem, {**spec, "seed": spec["seed"] + 42 * (i + 1)}, device)
            for i in range(benchmark_count(spec))]
