#!/usr/bin/env bash
# Live run of nvidia_facts on a real GPU host (the lent H200; Ansible carried as wheels).
# Writes into $OUT: the raw nvidia-smi output the module parses, the module's facts, the role
# and report on the real host (preflight as configured, then with host-size checks relaxed),
# the benchmark, and the unit tests' result under this host's Python.
#   OUT=/some/dir bash tests/device/live.sh [WHEEL_DIR]
set -uo pipefail
: "${OUT:?set OUT}"
wheels=${1:-.carry/wheels}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
python3 -m pip install -q --no-deps --target /tmp/ddtree-ansible "$wheels"/*.whl
export PYTHONPATH=/tmp/ddtree-ansible PATH=/tmp/ddtree-ansible/bin:$PATH
export ANSIBLE_CONFIG=$root/ansible.cfg ANSIBLE_HOME=/tmp/ddtree-ansible-home ANSIBLE_NOCOLOR=1
py=$(command -v python3)
fields=$(python3 -c 'import sys; sys.path.insert(0, ".collections"); from ansible_collections.ddtree.fleet.plugins.module_utils.nvidia import QUERY_FIELDS; print(",".join(QUERY_FIELDS))')
{ echo "# LC_ALL=C nvidia-smi --query-gpu=$fields --format=csv,noheader,nounits"
  LC_ALL=C nvidia-smi --query-gpu="$fields" --format=csv,noheader,nounits; } >"$OUT/query-gpu.txt" 2>&1
LC_ALL=C nvidia-smi topo -m >"$OUT/topo-m.txt" 2>&1
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
LC_ALL=C nvidia-smi -q >"$OUT/q.txt" 2>&1
LC_ALL=C nvidia-smi nvlink -s >"$OUT/nvlink-s.txt" 2>&1

cat >/tmp/live-inv.yml <<INV
all:
  children:
    fleet:
      children:
        gpu_hosts:
          hosts:
            h200-live:
              ansible_connection: local
              ansible_python_interpreter: $py
INV
cat >/tmp/live-facts.yml <<'PLAY'
- hosts: fleet
  gather_facts: false
  tasks:
    - ddtree.fleet.nvidia_facts:
        required: true
    - ansible.builtin.copy:
        content: "{{ ansible_facts.nvidia | to_nice_json(sort_keys=true) }}\n"
        dest: "{{ lookup('ansible.builtin.env', 'OUT') }}/facts.json"
        mode: "0644"
PLAY
echo "== module" ; ansible-playbook -i /tmp/live-inv.yml /tmp/live-facts.yml >"$OUT/module.log" 2>&1; echo "rc=$?"
echo "== role, profile as shipped (a 1-GPU host must fail preflight)"
DDTREE_REPORT_DIR=$OUT/report-strict ansible-playbook -i /tmp/live-inv.yml playbooks/facts.yml >"$OUT/role-strict.log" 2>&1; echo "rc=$?"
echo "== role, host-size checks relaxed"
DDTREE_REPORT_DIR=$OUT/report ansible-playbook -i /tmp/live-inv.yml playbooks/facts.yml \
  -e '{"nvidia_facts_model_size_gib": 1, "nvidia_facts_profile_host_overrides": {"gpus_required": 1, "min_ram_gib": 1, "parallelism": {"tp": 1}}}' \
  >"$OUT/role.log" 2>&1; echo "rc=$?"
echo "== benchmark"; python3 benchmarks/nvidia_facts_bench.py --runs 9 --json "$OUT/bench-live.json" >/dev/null 2>"$OUT/bench.err"; echo "rc=$?"
echo "== unit tests"; python3 -m pytest -q -p no:cacheprovider tests/unit >"$OUT/unit.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/unit.log"
tail -25 "$OUT/role-strict.log" | grep -E "h200-live:|failed=" | head -8
cat "$OUT/bench-live.json"
