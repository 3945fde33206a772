"""The one difference between our answer and the reference's that the tiny parity tests accept beside
byte equality (test_tiny_vision.py, test_tiny_video.py): a number one unit apart in the 4th decimal
where a reference probability sits at a rounding midpoint."""
import json

import numpy as np

TOL_P = 1e-6  # probabilities: |p - p32| <= TOL_P + |p32 - p64|


def near_tie(got_text, ref_text, ref_probs, tol_p=TOL_P):
    """True when the two responses differ only by one unit of the 4th decimal in numbers, and some
    reference probability lies within tol_p of a 4-decimal rounding midpoint."""
    try:
        g, r = json.loads(got_text), json.loads(ref_text)
    except ValueError:
        return False
    diffs = []

    def walk(a, b):
        if isinstance(a, dict) and isinstance(b, dict):
            if list(a) != list(b):
                return False
            return all(walk(a[k], b[k]) for k in a)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(walk(x, y) for x, y in zip(a, b))
        if isinstance(a, float) and isinstance(b, float) and a != b:
            diffs.append(abs(a - b))
            return True
        return a == b and type(a) is type(b)
    if not walk(g, r) or not diffs or max(diffs) > 1.0001e-4:
        return False
    return any(abs(p * 1e4 - (np.floor(p * 1e4) + 0.5)) * 1e-4 <= tol_p for p in ref_probs)
