"""pytest's root for experiments/tests: this folder on sys.path (pytest puts
a rootdir conftest's folder there), so the tests import psar_exp as the
scripts do."""
