import os
import sys

# The CrossHair targets (crosshair_targets, diff_targets, vllm_diff_targets) are
# plain modules next to the tests; CrossHair imports them by name.
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
