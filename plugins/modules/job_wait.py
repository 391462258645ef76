#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ddtree.fleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: job_wait
short_description: Wait for a background job, printing its progress lines
version_added: "0.2.0"
description:
  - Follows a job started with C(async) and C(poll=0) until it ends, in one task; checks it with
    C(async_status), reads the progress file the job writes (C(bytes), C(total), C(rate_bps), C(eta_s),
    JSON) and prints a progress line for the host every O(interval) seconds.
  - The result is the job's own result (its C(changed), its failure and message), so the task that
    waits is the task that reports what the job did.
  - An action plugin (it runs on the controller and calls C(async_status) and C(slurp) on the host); the
    wait is a loop, not nested includes, so it has no depth to run out of.
  - 'A progress line reads C(<host>: <label>: 1.25 of 4.00 GiB (31%), 12.5 MiB/s, ETA 220 s); the CLI
    draws its progress bar from them.'
options:
  jid:
    description: The C(ansible_job_id) of the job.
    type: str
    required: true
  progress_file:
    description: File on the host the job rewrites with its progress; empty for none (no progress lines).
    type: path
    default: ""
  label:
    description: What the progress lines name (a model, a venv).
    type: str
    default: job
  interval:
    description:
      - Seconds between progress lines, and the longest gap between two checks of the job. The first
        checks come sooner (from half a second up), so a short job is not held for a whole interval.
    type: float
    default: 10
  timeout:
    description:
      - Seconds to wait before giving up (the job goes on); 0 waits as long as the job's own C(async) limit.
    type: int
    default: 0
attributes:
  check_mode:
    support: full
    description: Only reads the job's state.
  diff_mode:
    support: none
    description: Changes nothing itself.
  action:
    support: full
    description: Runs on the controller and calls C(async_status) and C(slurp) on the host.
author:
  - ddtree.fleet developers (@ddtree)
"""

EXAMPLES = r"""
- name: Fetch in the background
  ddtree.fleet.model_fetch:
    repo_id: moonshotai/Kimi-K2.6
    dest: /opt/ddtree/models/target
    progress_file: /var/tmp/fetch.json
  async: 86400
  poll: 0
  register: fetch_job

- name: Follow the fetch
  ddtree.fleet.job_wait:
    jid: "{{ fetch_job.ansible_job_id }}"
    progress_file: /var/tmp/fetch.json
    label: moonshotai/Kimi-K2.6
  register: fetched
"""

RETURN = r"""
finished:
  description: Whether the job finished (false only when O(timeout) ran out first).
  returned: always
  type: bool
polls:
  description: How many times the job was checked.
  returned: always
  type: int
waited_s:
  description: Seconds spent waiting.
  returned: always
  type: float
progress_lines:
  description: The progress lines printed, oldest first.
  returned: always
  type: list
  elements: str
"""
