"""InferenceX launch scripts -> servelab launch profiles and the conformance table (docs/recipes.md).

    python scripts/ix_launch.py pin --inferencex PATH   # copy the scripts the master files select
    python scripts/ix_launch.py capture                   # run them with stub servers -> launches.json.gz
    python scripts/ix_launch.py profiles                  # derive recipes/data/launch-profiles.json
    python scripts/ix_launch.py docs                      # rewrite the conformance table in docs/recipes.md

The work is in servelab.recipes.engines.upstream; run it from a servelab checkout.
"""

from servelab.recipes.engines.upstream import main

if __name__ == "__main__":
    raise SystemExit(main())
