"""A small eval.py of our own that speaks the runner's protocol on CPU (for popkit's tests).

Modes test and benchmark; cases file lines 'key: value; ...'; results as 'key: value' lines on the
pipe named by POPCORN_FD; POPCORN_SEED remaps each seed as the real harness does.
"""
import math
import os
import sys
import time

from reference import check_implementation, generate_input


def parse(path, salt):
    cases = []
    for line in open(path).read().splitlines():
        args = {}
        for part in line.split(";"):
            key, _, value = part.partition(":")
            value = value.strip()
            args[key.strip()] = int(value) if value.lstrip("+-").isdigit() else value
        if salt is not None:
            a = args["seed"]
            args["seed"] = a + (a + salt) * (a + salt + 1) // 2
        cases.append((line, args))
    return cases


def main():
    fd = os.getenv("POPCORN_FD")
    if not fd:
        return 111
    out = os.fdopen(int(fd), "w")
    log = lambda key, value: print(f"{key}: {value}", file=out, flush=True)  # noqa: E731
    mode, path = sys.argv[1], sys.argv[2]
    salt = os.getenv("POPCORN_SEED")
    cases = parse(path, int(salt) if salt else None)
    from submission import custom_kernel
    kind = "test" if mode == "test" else "benchmark"
    log(f"{kind}-count", len(cases))
    passed = True
    for i, (spec, args) in enumerate(cases):
        log(f"{kind}.{i}.spec", spec)
        data = generate_input(**args)
        try:
            good, message = check_implementation(data, custom_kernel(list(data)))
        except Exception as exc:
            good, message = False, f"{type(exc).__name__}: {exc}"
        if not good:
            passed = False
            log(f"{kind}.{i}.status", "fail")
            log(f"{kind}.{i}.error", message)
            continue
        if kind == "test":
            log(f"{kind}.{i}.status", "pass")
            log(f"{kind}.{i}.message", message)
            continue
        samples = []
        for _ in range(5):
            start = time.perf_counter_ns()
            custom_kernel(data)
            samples.append(time.perf_counter_ns() - start)
        mean = sum(samples) / len(samples)
        std = math.sqrt(sum((x - mean) ** 2 for x in samples) / (len(samples) - 1))
        for key, value in (("runs", len(samples)), ("mean", mean), ("std", std),
                           ("err", std / math.sqrt(len(samples))), ("best", min(samples)), ("worst", max(samples))):
            log(f"{kind}.{i}.{key}", value)
    log("check", "pass" if passed else "fail")
    return 0 if passed else 112


if __name__ == "__main__":
    sys.exit(main())
