"""The toy problem's inputs, reference and check (pure Python, so tests start fast)."""
import random


def generate_input(size, seed, mode="narrow"):
    rng = random.Random(seed)
    span = 1000 if mode == "wide" else 10
    return [rng.randint(-span, span) for _ in range(size)]


def ref_kernel(data):
    return [x + 1 for x in data]


def check_implementation(data, output):
    if not isinstance(output, list) or len(output) != len(data):
        return False, "output must be a list of the input's length"
    bad = [i for i, (x, y) in enumerate(zip(data, output)) if y != x + 1]
    if bad:
        return False, f"wrong value at index {bad[0]}"
    return True, f"checked {len(data)} values"
