"""scripts/sweep_route.py: every variant is timed by the checker's own code for a diff case (worker.time_rounds, on
the case's benchmark inputs), the baseline by bench's (worker.time_baseline), each variant's calls under its own
globals, and the route's tables are put back afterwards, also when a variant fails (CPU, the cholesky route)."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from checks import timing, worker
from checks.problems import load_problem, parse_spec
from checks.timing import Stats
from parts.cholesky import route

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "sweep_route.py"
BUILT = "import torch\n\nTAG = 'default'\n\ndef custom_kernel(A):\n    return torch.linalg.cholesky(A)\n"
TINY = "batch: 1; n: 4; cond: 1; seed: 1"


@pytest.fixture(scope="module")
def sweep_script(import_module):
    return import_module(SCRIPT, "sweep_route")


@pytest.fixture
def prob():
    return load_problem("cholesky")


@pytest.fixture
def two_inputs(prob, monkeypatch):
    """The case's first two benchmark inputs only: the grader's 50 inputs of a small case, each timed through
    the cholesky route's CPU model in every round, take tens of seconds here."""
    full = prob.native.benchmark_inputs
    monkeypatch.setattr(prob.native, "benchmark_inputs", lambda spec, device="cpu": full(spec, device)[:2])


@pytest.fixture
def three_repeats(monkeypatch):
    """cpu_rule's loops stop at 3 repeats, never at its 2 s wall cap (a loaded machine made that flaky)."""
    monkeypatch.setattr(timing, "CPU_WALL_S", 1e9)


def tagged_module(calls: list):
    """A built file stand-in whose custom_kernel records the TAG global in force at each call."""
    module = SimpleNamespace(TAG="default")

    def custom_kernel(A):
        calls.append(module.TAG)
        return torch.linalg.cholesky(A)
    module.custom_kernel = custom_kernel
    return module


def test_every_variant_is_checked_and_timed_and_the_tables_come_back(sweep_script, prob, two_inputs):
    case = parse_spec("batch: 2; n: 200; cond: 2; seed: 7", prob)
    before = route.BLOCK_NB
    variants = {"default": {}, "nb64": {"BLOCK_NB": [[1 << 30, 64]]}}
    seen = []
    rows = sweep_script.sweep(route, prob, variants, [case], 3, "cpu", seen.append)
    assert route.BLOCK_NB == before
    assert rows == seen and len(rows) == 1
    assert set(rows[0]["variants"]) == {"default", "nb64"}
    for result in rows[0]["variants"].values():
        assert result["passed"] and result["mean_us"] > 0 and 0 <= result["worst_fraction"] < 1
        assert result["runs"] == 3 and result["best_us"] <= result["mean_us"] <= result["worst_us"]
    assert rows[0]["baseline_us"] is None           # not asked for


def test_each_variant_s_calls_run_under_its_own_globals_and_the_defaults_come_back(sweep_script, prob,
                                                                                   three_repeats):
    calls = []
    module = tagged_module(calls)
    variants = {"first": {}, "second": {"TAG": "b"}, "third": {"TAG": "c"}}
    per_loop = 4 * len(prob.native.benchmark_inputs(parse_spec(TINY, prob), "cpu"))   # warm-up and 3 repeats
    sweep_script.sweep(module, prob, variants, [parse_spec(TINY, prob)], 3, "cpu")
    assert module.TAG == "default"
    loops = [set(calls[k:k + per_loop]) for k in range(0, len(calls), per_loop)]
    assert loops == [{tag} for tag in ("default", "b", "c", "c", "b", "default", "b", "c", "default")]


def test_a_variant_that_raises_is_reported_in_its_cell_and_the_others_still_run(sweep_script, prob, two_inputs):
    # A raising variant ended the whole sweep in a traceback, the variants after it untimed.
    case = parse_spec("batch: 1; n: 150; cond: 2; seed: 3", prob)
    before = route.BLOCK_NB
    rows = sweep_script.sweep(route, prob, {"broken": {"BLOCK_NB": [[1 << 30, 0]]}, "default": {}}, [case], 3,
                              "cpu")
    assert route.BLOCK_NB == before
    broken, default = rows[0]["variants"]["broken"], rows[0]["variants"]["default"]
    assert not broken["passed"] and broken["error"].startswith("ValueError: ") and "nb (0)" in broken["error"]
    assert "mean_us" not in broken and default["passed"] and default["runs"] == 3


def test_a_variant_that_fails_a_gate_is_named_with_the_gate_and_sits_out_the_later_rounds(sweep_script, prob,
                                                                                          three_repeats):
    calls = []
    module = tagged_module(calls)
    honest = module.custom_kernel
    module.custom_kernel = lambda A: honest(A) * (2.0 if module.TAG == "bad" else 1.0)
    rows = sweep_script.sweep(module, prob, {"default": {}, "bad": {"TAG": "bad"}}, [parse_spec(TINY, prob)], 4,
                              "cpu")
    bad, default = rows[0]["variants"]["bad"], rows[0]["variants"]["default"]
    assert not bad["passed"] and bad["error"].startswith("input 1 of ") and "reconstruction" in bad["error"]
    count = len(prob.native.benchmark_inputs(parse_spec(TINY, prob), "cpu"))
    assert calls.count("bad") == count                # its first warm-up, every input called before any check
    assert default["runs"] == 4 and calls.count("default") == 4 * 4 * count


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_sweep_and_diff_time_a_case_through_the_same_function_with_the_same_arguments(
        sweep_script, prob, monkeypatch, device):
    # The sweep timed one call on a clone of one input a sample, its own loop: on the H200 it said 0.949x at
    # 2x4096 where the diff said 1.045x. Both now go through worker.time_rounds; only the sweep's own additions
    # (BEFORE: the variant's globals; FAILURES: a failed variant sits out) may differ.
    seen = []

    def time_rounds(problem, kernels, inputs, dev, rounds, send, label, before=None, failures=None):
        seen.append(SimpleNamespace(problem=problem, kernels=kernels, inputs=inputs, device=dev, rounds=rounds,
                                    label=label, before=before, failures=failures))
        report = SimpleNamespace(passed=True, residuals={"reconstruction": [1.0, 20.0]}, message=None)
        return {name: report for name in kernels}, {name: [1000.0, 1100.0, 1200.0] for name in kernels}
    made = []
    full = prob.native.benchmark_inputs
    monkeypatch.setattr(prob.native, "benchmark_inputs", lambda spec, dev: made.append(dev) or full(spec, "cpu"))
    monkeypatch.setattr(worker, "time_rounds", time_rounds)
    spec = parse_spec(TINY, prob)
    kernels = {"candidate": lambda A: A, "incumbent": lambda A: A}
    worker.run_diff_case("cholesky", kernels, spec, device, 4, lambda message: None)
    module = tagged_module([])
    rows = sweep_script.sweep(module, prob, {"candidate": {}, "incumbent": {"TAG": "x"}}, [spec], 4, device)
    diff, sweep = seen
    assert made == [device, device]
    assert (sweep.problem, sweep.device, sweep.rounds, sweep.label) == (diff.problem, diff.device, diff.rounds,
                                                                          diff.label) == ("cholesky", device, 4,
                                                                                          "1x4 dense c1")
    assert len(sweep.inputs) == len(diff.inputs) == len(full(spec, "cpu")) > 1
    assert all(torch.equal(a, b) for a, b in zip(sweep.inputs, diff.inputs))
    assert list(sweep.kernels) == list(diff.kernels) and set(sweep.kernels.values()) == {module.custom_kernel}
    assert diff.before is None and diff.failures is None and sweep.failures == {}
    assert rows[0]["variants"]["incumbent"]["mean_us"] == pytest.approx(1.1)


def test_the_baseline_is_timed_as_bench_times_it_after_the_rounds(sweep_script, prob, monkeypatch):
    seen = []

    def time_baseline(problem, inputs, device, send, label):
        seen.append((problem, inputs, device, label))
        return Stats.from_samples([2e6, 2e6]), True
    monkeypatch.setattr(worker, "time_baseline", time_baseline)
    monkeypatch.setattr(worker, "time_kernel", lambda *args, **kwargs: (SimpleNamespace(passed=True, residuals={}),
                                                                         Stats.from_samples([1.0])))
    spec = parse_spec(TINY, prob)
    worker.run_bench_case("cholesky", lambda A: A, spec, "cpu", True, lambda message: None)
    rows = sweep_script.sweep(tagged_module([]), prob, {"default": {}}, [spec], 3, "cpu", baseline=True)
    bench, sweep = seen
    assert sweep[0] == bench[0] == "cholesky" and sweep[2:] == bench[2:] == ("cpu", "1x4 dense c1")
    assert len(sweep[1]) == len(bench[1]) > 1 and all(torch.equal(a, b) for a, b in zip(sweep[1], bench[1]))
    assert rows[0]["baseline_us"] == 2000.0 and rows[0]["baseline_bounded"] is True


class Recorder:
    """What happens around a timed call, in order: inputs made, the clock's timed region, each kernel call
    (which variant, on which input: a generated input itself or a copy of it), each gate check."""

    def __init__(self, prob, monkeypatch):
        self.events, self.inputs = [], []
        full, check = prob.native.benchmark_inputs, prob.native.check_output
        recorder = self

        def benchmark_inputs(spec, device="cpu"):
            recorder.inputs = full(spec, device)[:3]
            recorder.events.append(("inputs", len(recorder.inputs)))
            return recorder.inputs

        class Clock:
            def measure(self, run):
                recorder.events.append("start")
                result = run()
                recorder.events.append("end")
                return 1000.0, result
        monkeypatch.setattr(prob.native, "benchmark_inputs", benchmark_inputs)
        monkeypatch.setattr(prob.native, "check_output", lambda A, out: self.note("check", A) or check(A, out))
        monkeypatch.setattr(timing, "PerfCounterClock", Clock)

    def which(self, A) -> str:
        for index, generated in enumerate(self.inputs):
            if A is generated:
                return f"input {index}"
            if torch.equal(A, generated):
                return f"copy of {index}"
        return "other"

    def note(self, what: str, A) -> None:
        self.events.append((what, self.which(A)))

    def kernel(self, tag: str):
        def custom_kernel(A):
            self.note(f"call {tag}", A)
            return torch.linalg.cholesky(A)
        return custom_kernel


def test_the_sweep_runs_a_case_exactly_as_the_diff_does_and_that_is_the_graders_loop(sweep_script, prob,
                                                                                      monkeypatch, three_repeats):
    # The events of a real run of each (a clock that records its timed region), compared: the diff of two kernels
    # and the sweep of two variants whose calls record their variant.
    recorder = Recorder(prob, monkeypatch)
    spec = parse_spec(TINY, prob)
    worker.run_diff_case("cholesky", {"candidate": recorder.kernel("a"), "incumbent": recorder.kernel("b")}, spec,
                         "cpu", 3, lambda message: None)
    diff_events, recorder.events = recorder.events, []
    module = SimpleNamespace(TAG="a")
    module.custom_kernel = lambda A: recorder.kernel(module.TAG)(A)
    sweep_script.sweep(module, prob, {"candidate": {}, "incumbent": {"TAG": "b"}}, [spec], 3, "cpu")
    assert recorder.events == diff_events
    # ... and it is eval.py's loop: inputs made once; per round and side, every copy called, then checked; then
    # three repeats of a timed region holding one call on each input itself, in order, each followed by a
    # re-check of every output against the pristine copies.
    warm = [("call a", f"copy of {i}") for i in range(3)] + [("check", f"copy of {i}") for i in range(3)]
    repeat = ["start", *[("call a", f"input {i}") for i in range(3)], "end", *[("check", f"copy of {i}")
                                                                              for i in range(3)]]
    loop = warm + 3 * repeat
    assert diff_events[0] == ("inputs", 3) and diff_events[1:1 + len(loop)] == loop
    sides = [event[0][-1] for event in diff_events if isinstance(event, tuple) and event[0].startswith("call")]
    assert "".join(sides[::3 + 3 * 3]) == "abbaba"       # one loop per side and round, in timing.alternate's order
    assert len(diff_events) == 1 + 6 * len(loop)


def test_a_variant_that_sets_a_name_the_route_lacks_is_named(sweep_script):
    # A misspelt tunable was set as a new global and the variant timed the default under its name.
    variants = {"default": {}, "typo": {"BLOCK_NB": [[1 << 30, 64]], "BLOKC_NB": 1, "ALSO_MISSING": 2}}
    assert sweep_script.unknown_globals(route, variants) == ["ALSO_MISSING", "BLOKC_NB"]
    assert sweep_script.unknown_globals(route, {"default": {}}) == []


@pytest.mark.parametrize("args, line", [
    (["nope", "variants.json"], "error: unknown problem 'nope' (known: "),
    (["cholesky", "variants.json", "--case", "batch: 2; n: 8"], "error: case spec {'batch': 2, 'n': 8} lacks 'cond', "),
    (["vectoradd", "variants.json"], "error: vectoradd is a harness problem: sweep_route.py checks each variant"),
    (["cholesky", "list.json"], "error: list.json: not an object of variants, each an object of the globals it sets"),
    (["cholesky", "variants.json", "--json", "."], "error: --json .: a folder; name the file to write"),
    (["cholesky", "variants.json", "--reps", "2"], "error: --reps 2: at least 3 alternating rounds a case"),
])
def test_a_problem_case_or_variants_it_cannot_run_is_one_line_before_the_import(sweep_script, tmp_path, monkeypatch,
                                                                                 capsys, args, line):
    # Each was a traceback (ProblemError, AttributeError, TypeError), after the built file's import: on a GPU
    # host a CUDA compile.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "built.py").write_text("def custom_kernel(A):\n    return A\n\nraise SystemExit('imported')\n")
    (tmp_path / "variants.json").write_text('{"default": {}}')
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(SystemExit) as stop:
        sweep_script.main(["built.py", *args])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and err.startswith(line), err


def test_its_json_goes_into_a_folder_that_does_not_exist_yet(sweep_script, tmp_path, monkeypatch):
    # open() failed with a FileNotFoundError traceback once every case had been timed, and the rows were lost.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "built.py").write_text(BUILT)
    (tmp_path / "variants.json").write_text('{"default": {}}')
    out = tmp_path / "new" / "sweep.json"
    sweep_script.main(["built.py", "cholesky", "variants.json", "--reps", "3", "--case", TINY, "--json", str(out)])
    rows = json.loads(out.read_text())
    assert [row["spec"]["n"] for row in rows] == [4] and rows[0]["variants"]["default"]["passed"]
    assert rows[0]["variants"]["default"]["runs"] == 3 and rows[0]["baseline_us"] is None


@pytest.mark.parametrize("baseline", [False, True])
def test_each_variant_s_cell_sits_under_its_name(sweep_script, tmp_path, monkeypatch, capsys, baseline):
    # The names were right-aligned in 22 characters over cells of 23: every column drifted one to the left.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "built.py").write_text(BUILT)
    (tmp_path / "variants.json").write_text('{"first": {}, "second": {"TAG": "x"}}')
    sweep_script.main(["built.py", "cholesky", "variants.json", "--reps", "3", "--case", TINY]
                      + ["--baseline"] * baseline)
    lines = capsys.readouterr().out.splitlines()
    header, row = lines[lines.index("") - 2:lines.index("")]          # the table, then the verdicts after a blank line
    assert len(header) == len(row)
    base = row[22:36].strip()                           # the baseline column
    assert float(base.rstrip("~")) > 0 if baseline else base == "-"
    for k, name in enumerate(("first", "second")):
        end = 36 + sweep_script.CELL * (k + 1)          # case (22) and baseline (14) columns, then the cells
        assert header[:end].endswith(" " + name)
        assert row[:end].split()[-2:][0] == "ok" and row[end - 1].isdigit()   # '... ok 0.004' ends right there


def test_a_failed_variant_s_cell_says_so_and_its_line_follows(sweep_script, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "built.py").write_text(BUILT.replace("return torch", "return (2 if TAG == 'x' else 1) * torch"))
    (tmp_path / "variants.json").write_text('{"default": {}, "wrong": {"TAG": "x"}}')
    sweep_script.main(["built.py", "cholesky", "variants.json", "--reps", "3", "--case", TINY])
    lines = capsys.readouterr().out.splitlines()
    header, row, why = lines[lines.index("") - 3:lines.index("")]
    assert row[36:36 + sweep_script.CELL].split()[1] == "ok" and row[36 + sweep_script.CELL:].split() == ["failed"]
    assert why.startswith("  wrong failed: input 1 of 50: reconstruction: ")
    assert lines[-1] == "1x4 dense c1            wrong -"                 # no verdict for a variant that failed


def test_a_file_built_for_another_problem_is_refused_before_the_import(sweep_script, tmp_path, monkeypatch, capsys):
    # qr_v2's build swept as cholesky was imported and timed: every cell "failed" on its output's shape, exit 0.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "built.py").write_text("#!POPCORN leaderboard qr_v2\ndef custom_kernel(A):\n    return A\n\n"
                                       "raise SystemExit('imported')\n")
    (tmp_path / "variants.json").write_text('{"default": {}}')
    with pytest.raises(SystemExit) as stop:
        sweep_script.main(["built.py", "cholesky", "variants.json"])
    err = capsys.readouterr().err
    board = load_problem("cholesky").leaderboard
    assert stop.value.code == 2 and err == (f"error: built.py is built for leaderboard qr_v2 (its #!POPCORN "
                                            f"leaderboard line), not {board}: run `popkit build cholesky -o FILE.py` "
                                            "and pass FILE.py\n")


def test_a_file_that_is_no_submission_is_refused_before_the_import(sweep_script, tmp_path, monkeypatch, capsys):
    # Imported, it ended in an AttributeError traceback (module.custom_kernel) or, on a GPU host, after a compile.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "built.py").write_text("raise SystemExit('imported')\n")
    (tmp_path / "variants.json").write_text('{"default": {}}')
    with pytest.raises(SystemExit) as stop:
        sweep_script.main(["built.py", "cholesky", "variants.json"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("error: built.py is not a submission (defines no custom_kernel ")
    assert err.endswith("`popkit build cholesky` makes one; pass the file it writes (-o FILE.py)\n")


def test_help_shows_the_variants_format_and_what_each_option_is(sweep_script, capsys):
    # --help printed the docstring's first line only: no word of VARIANTS.json's form, --case or --json.
    with pytest.raises(SystemExit) as stop:
        sweep_script.main(["--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0 and "VARIANTS.json maps a variant name to module globals" in out
    assert "--case SPEC" in out and "--json OUT" in out and "rewritten after each case" in out


def test_progress_names_each_case_and_each_variant_s_rounds_as_they_run(sweep_script, prob, three_repeats):
    # It printed nothing until a case's row: on a CPU two tiny qr_v2 cases took 90 s in silence.
    lines = []
    spec = parse_spec(TINY, prob)
    sweep_script.sweep(tagged_module([]), prob, {"first": {}, "second": {"TAG": "b"}}, [spec, spec], 3, "cpu",
                       baseline=True, progress=lines.append)
    assert lines[0] == "case 1/2: 1x4 dense c1" and "case 2/2: 1x4 dense c1" in lines
    assert "1x4 dense c1 second round 3/3: repeat 1, mean " in "\n".join(lines)
    assert any(line.startswith(f"1x4 dense c1 {prob.native.BASELINE_NAME}: repeat 1") for line in lines)


def test_on_a_cpu_a_note_says_its_timings_say_nothing_of_a_gpu(sweep_script, tmp_path, monkeypatch, capsys):
    # bench and diff say so on a CPU; the sweep printed its table of CPU times without a word.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "built.py").write_text(BUILT)
    (tmp_path / "variants.json").write_text('{"default": {}}')
    sweep_script.main(["built.py", "cholesky", "variants.json", "--reps", "3", "--case", TINY])
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"note: no GPU: CPU timings say nothing about GPU speed; {timing.cpu_bound_text()}"
    assert err[1] == "  .. case 1/1: 1x4 dense c1"


def test_each_later_variant_is_judged_against_the_first_as_the_diff_judges_a_case(sweep_script, prob, two_inputs,
                                                                                   monkeypatch, capsys):
    case = parse_spec("batch: 2; n: 200; cond: 2; seed: 7", prob)
    samples = iter([[1000.0, 1000.0, 1000.0], [700.0, 700.0, 700.0], [1001.0, 999.0, 1000.0]])
    reports = {name: SimpleNamespace(passed=True, residuals={"reconstruction": [0.1, 1.0]})
               for name in ("default", "fast", "same")}
    monkeypatch.setattr(worker, "time_rounds", lambda *args, **kwargs: (reports, {
        name: next(samples) for name in ("default", "fast", "same")}))
    rows = sweep_script.sweep(route, prob, {"default": {}, "fast": {}, "same": {}}, [case], 3, "cpu")
    result = rows[0]["variants"]
    assert "vs_first" not in result["default"]
    assert result["fast"]["vs_first"] == {"ratio": 0.7, "verdict": "faster"}
    assert result["same"]["vs_first"]["verdict"] == "within noise"
    sweep_script.print_verdicts(rows, ["default", "fast", "same"])
    assert capsys.readouterr().out.splitlines()[-1] == ("2x200 dense c2          fast 0.700 faster; "
                                                        "same 1.000 within noise")
