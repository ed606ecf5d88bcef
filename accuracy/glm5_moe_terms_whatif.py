"""What-if, never shipped: the closed loop with SGLang's fitted MoE terms (eager_moe_route_us, moe_route_us;
calibrated.json) reaching GLM-5 on every system (`--reach all`) or on none (`--reach none`), where
predict/fit_reach.py lets them reach it on H200 only (the fit's system). docs/accuracy.md, "GLM-5 on B200:
where the time goes".

    cd accuracy && PYTHONPATH=../src python glm5_moe_terms_whatif.py --reach all -- \
        --part dev --out OUT --only glm_5
"""

import argparse
import runpy
import sys
from pathlib import Path

from servelab.predict.fit_reach import FitReach
from servelab.specs.families import family_of

CLOSED_LOOP = Path(__file__).with_name("closed_loop.py")
shipped_verdict = FitReach.verdict


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--reach", choices=("all", "none"), required=True)
    ap.add_argument("closed_loop_args", nargs=argparse.REMAINDER, help="after --: closed_loop.py's arguments")
    args = ap.parse_args()
    reach = args.reach == "all"

    def verdict(self: FitReach, model: str, system: str) -> tuple[bool, str]:
        if family_of(model) == "glm-5":
            return reach, f"what-if: the terms reach glm-5 on {'every' if reach else 'no'} system"
        return shipped_verdict(self, model, system)

    FitReach.verdict = verdict  # type: ignore[method-assign]
    rest = [a for a in args.closed_loop_args if a != "--"]
    sys.argv = [str(CLOSED_LOOP), *rest]
    runpy.run_path(str(CLOSED_LOOP), run_name="__main__")


if __name__ == "__main__":
    main()
