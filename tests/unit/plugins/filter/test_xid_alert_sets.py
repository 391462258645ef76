"""The XID sets of the alert rules (plugins/filter/gpu.py xid_alert_sets over plugins/module_utils/xid_catalog.yml);
promtool evaluates the rules they make in test_monitoring.py."""
import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ddtree.fleet.plugins.filter.gpu import xid_alert_sets
from ansible_collections.ddtree.fleet.plugins.module_utils import xid


def test_the_default_policy_refuses_the_catalogues_hard_faults_and_warns_on_application_xids():
    actions = xid.actions_by_xid()
    assert [actions[x] for x in (79, 48, 64, 74, 94, 95, 119, 120)] == ["refuse"] * 8
    assert actions[63] == "ignore"  # a row remapping event: the catalogue says IGNORE
    assert [actions[x] for x in (13, 31, 43)] == ["warn"] * 3


def test_hosts_that_share_a_policy_share_a_rule_and_overrides_count():
    sets = xid_alert_sets([{"host": "a", "health": {}}, {"host": "b", "health": {}},
                           {"host": "c", "health": {"xid_policy": {"application": "ignore"}, "xid_overrides": {"13": "refuse", "999": "warn"}}}])
    by = dict(((s["action"], tuple(s["hosts"])), s["xids"]) for s in sets)
    assert 79 in by[("refuse", ("a", "b"))] and 13 not in by[("refuse", ("a", "b"))]
    assert 13 in by[("refuse", ("c",))] and 13 in by[("warn", ("a", "b"))]
    assert 31 not in by[("warn", ("c",))] and 999 in by[("warn", ("c",))]


def test_a_host_name_is_data_in_the_promql_string():
    evil = 'gpu-1.x"} or vector(1) #\\'
    lenient = {"xid_policy": dict((c, "warn") for c in ("memory", "fallen_off_bus", "nvlink", "gsp", "reset_required"))}
    assert not [s for s in xid_alert_sets([{"host": evil, "health": lenient}]) if s["action"] == "refuse"]  # none refused
    [s] = [s for s in xid_alert_sets([{"host": evil, "health": {}}]) if s["action"] == "refuse"]
    # unescaped inside "...": no quote ends the string early, the backslash is doubled
    body = s["host_match"]
    assert not re.search(r'(?<!\\)"', body.replace('\\\\', '')) and body.endswith('\\\\\\\\')


def test_bad_input_is_named():
    with pytest.raises(AnsibleFilterError, match="each item needs host and health"):
        xid_alert_sets([{"health": {}}])
