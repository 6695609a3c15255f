# Placeholder: the experiment DAG is being built (issue 6).
rule all:
    run:
        print("reasoning-rl: the workflow is not written yet; see the README.")
