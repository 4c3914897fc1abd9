#!/usr/bin/env bash
# A reference tree for A/B runs on the GPU machine (which gets the working tree, not .git):
# moye/ and benchmarks/ of git revision REV, in .ab/NAME (gitignored; carry it).
#   scripts/ab_tree.sh REV [NAME]        (NAME: REV's short hash)
# then, in one device call with carry [".whl", ".ab"]:
#   AB_TREE=.ab/NAME ROWWISE_ARGS="--ops layer_norm --ns 65536" scripts/gpu_check.sh rowwise_ab
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/ab_tree.sh REV [NAME]}
name=${2:-$(git rev-parse --short "$rev")}
rm -rf ".ab/$name"
mkdir -p ".ab/$name"
git archive "$rev" moye benchmarks | tar -x -C ".ab/$name"
rm -rf ".ab/$name/benchmarks/results"      # the raw results: MBs the runs do not read
du -sh ".ab/$name"
