# Sourced (from the repository root) by the benchmark scripts that run the local cluster
# (deploy/local/cluster.sh) on the embedded pack: sets P, the pack's directory, and exports the
# cluster's model paths and its ports (router 127.0.0.1:53050, metrics from 12090), apart from
# the defaults a user's own cluster takes. $1, when given: the cluster's run directory
# (SPECDEC_RUN_DIR).
#   . bench/pack_cluster_env.sh /tmp/my-bench-cluster
P=models/specdec-pycode
export SPECDEC_PORT_BASE=53050 SPECDEC_METRICS_BASE=12090 TARGET_MODEL=$P/target DRAFT_LM=$P/draft \
  DFLASH_MODEL=$P/dflash POLICY_MODEL=$P/policy
if [ -n "${1:-}" ]; then export SPECDEC_RUN_DIR=$1; fi
