"""parts/eigh/route.py: which route decomposes a batch of size n, and what result_check accepts from ours.

The "by n" table sends only the measured range to our route; a misspelt REDUCTION must fail loudly rather than
fall through to a route nobody chose. The eigen equation's acceptance must keep an accepted matrix of ours under
the diff's tiny margin, or `popkit diff` refuses the route on a case cuSOLVER solves far inside its gate."""
import pytest
import torch

from checks import verdicts
from checks.native import native_checker
from parts.common.cuda_loader import CUDA
from parts.eigh import reduction_route, result_check, route

GATES = {gate.name: gate.limit for gate in native_checker("eigh").GATES}


@pytest.mark.parametrize("n, expected", [(33, "cusolver"), (176, "cusolver"), (177, "ours"), (352, "ours"),
                                         (512, "ours"), (1024, "ours"), (1025, "cusolver"), (2048, "cusolver")])
def test_by_n_sends_the_measured_range_to_ours(monkeypatch, n, expected):
    monkeypatch.setattr(route, "REDUCTION", "by n")
    assert route.reduction_for(n) == expected


@pytest.mark.parametrize("name", ["cusolver", "ours"])
def test_a_named_route_holds_for_every_n(monkeypatch, name):
    monkeypatch.setattr(route, "REDUCTION", name)
    assert {route.reduction_for(n) for n in (33, 512, 4096)} == {name}


def test_a_misspelt_reduction_is_refused(monkeypatch):
    monkeypatch.setattr(route, "REDUCTION", "by_n")
    with pytest.raises(ValueError, match="'by_n'"):
        route.reduction_for(512)


@pytest.mark.parametrize("table, n, expected", [({}, 2048, 1), ({2048: 16}, 2048, 16),
                                                ({"2048": 16, "1024": 2}, 1024, 2), ({"2048": 16}, 1024, 1)])
def test_cluster_reads_int_keys_and_the_string_keys_of_json(monkeypatch, table, n, expected):
    """reduction_route.CLUSTER as the route holds it, or as a script's --set '{"CLUSTER": {"2048": 16}}' gives it."""
    monkeypatch.setattr(reduction_route, "CLUSTER", table)
    assert reduction_route.cluster_for(n) == expected


@pytest.mark.parametrize("size, symv, n", [(3, "tiles", 512), (32, "tiles", 512), ("16", "tiles", 512),
                                           (2, "rows", 512), (2, "tiles", 514)])
def test_a_cluster_the_kernel_refuses_is_a_value_error(monkeypatch, size, symv, n):
    """Sizes 2, 4, 8, 16, over 1 only in the tiles form and at n % 4 == 0 (the kernel's float4 form)."""
    monkeypatch.setattr(reduction_route, "CLUSTER", {n: size})
    monkeypatch.setattr(reduction_route, "SYMV", symv)
    with pytest.raises(ValueError, match="CLUSTER"):
        reduction_route.cluster_for(n)


def test_the_reduction_kernel_gets_the_cluster_size(monkeypatch):
    calls = []
    monkeypatch.setattr(CUDA, "call", lambda entry, *args: calls.append((entry, args[-1])))
    monkeypatch.setattr(reduction_route, "CLUSTER", {"64": 4})
    reduction_route.tridiagonalize_cuda(torch.zeros(2, 64, 64))
    reduction_route.tridiagonalize_cuda(torch.zeros(2, 68, 68))
    assert calls == [("eigh_tridiagonalize", 4), ("eigh_tridiagonalize", 1)]


def test_the_cpu_path_ignores_the_table():
    A = torch.randn(2, 40, 40)
    A = A + A.mT
    Q, L = route.custom_kernel(A)
    assert torch.allclose(Q @ torch.diag_embed(L) @ Q.mT, A, atol=1e-4)


def test_accepted_eigen_equation_stays_under_the_diffs_tiny_margin():
    assert result_check.ACCEPT["eigen_equation"] <= verdicts.TINY_MARGIN * GATES["eigen_equation"]


def test_every_acceptance_is_inside_its_gate():
    for name, accept in result_check.ACCEPT.items():
        assert 0 < accept < GATES[name]
