"""``rrl`` with the stand-in grader :func:`micro_world.fake_grade`, as a script: what the
distributed tests start under ``torchrun`` (their one-process reference runs in the test's own
process with the same grader), so that runs from the barely trained micro world have groups
with different rewards (the real grader scores its outputs 0, and every update would be zero).

    PYTHONPATH=$PWD:$PWD/tests/helpers python tests/helpers/graded_rrl.py grpo --set ... --out DIR
    torchrun --standalone --nproc_per_node 2 tests/helpers/graded_rrl.py grpo --set ... --out DIR
"""

import sys

from micro_world import fake_grade  # tests/helpers on PYTHONPATH, as the launching test sets

from reasoning_core.runtime.cli import main
from reasoning_core.runtime.training import rollouts

if __name__ == "__main__":
    rollouts.grade = fake_grade
    sys.exit(main())
