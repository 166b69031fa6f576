"""Entry point kept for the documented command; the linter lives beside the files it checks.

    python -m sweeps.cluster_check [FILE...]        # = python -m clusters.cluster_check [FILE...]
"""
import sys

from clusters.cluster_check import main

if __name__ == "__main__":
    sys.exit(main())
