# Measures the SWA chunks each 0.34.0 tree stores and the repeated prompt's hit
# (docs/upstream/README.md, "Cost"). Copy into a tree's
# tests/v1/kv_connector/unit/offloading_connector/ beside the patched
# test_scheduler.py (it uses its _later_offload_hit_tokens) and run it with pytest,
# MEASURE_OUT=FILE (one JSON line per case). Not part of either patch.
import json, os
import pytest, torch
from tests.v1.kv_connector.unit.offloading_connector.test_scheduler import (
    _later_offload_hit_tokens, generate_store_output, EOS_TOKEN_ID,
)
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheGroupSpec, SlidingWindowSpec

CASES = {
    "window-17": (17, 0, None, False, False),
    "extra-retained-5": (16, 5, None, False, False),
    "retention-interval-72": (16, 0, 72, False, False),
    "retention-interval-0": (16, 0, 0, False, False),
    "window-16": (16, 0, None, False, False),
    "eagle-window-17-legacy-hashes": (17, 0, None, True, False),
    "eagle-legacy-hashes": (16, 0, None, True, False),
    "eagle-window-17-lookahead-hashes": (17, 0, None, True, True),
    "eagle-lookahead-hashes": (16, 0, None, True, True),
}

@pytest.mark.skip_global_cleanup
@pytest.mark.parametrize("name", list(CASES))
def test_measure(request_runner, name):
    W, extra, R, eagle, lookahead = CASES[name]
    groups = [KVCacheGroupSpec(["layer0"], FullAttentionSpec(block_size=36, num_kv_heads=1, head_size=1, dtype=torch.float32)),
              KVCacheGroupSpec(["layer1"], SlidingWindowSpec(block_size=4, num_kv_heads=1, head_size=1, dtype=torch.float32, sliding_window=W, extra_retained_tokens=extra), is_eagle_group=eagle)]
    runner = request_runner(block_size=4, num_gpu_blocks=1000, async_scheduling=False, kv_cache_groups=groups, retention_interval=R)
    runner.connector_scheduler.use_lookahead_block_hashes = lookahead
    token_ids = [0] * 1188
    runner.new_request(token_ids=token_ids)
    runner.manager.prepare_store.side_effect = lambda keys, req_context: generate_store_output(keys)
    runner._run([1, 1, EOS_TOKEN_ID], complete_transfers=True)
    stored = {k for t in runner.completed_stores for k, _ in t.offload_addresses}
    swa = sum(1 for t in runner.completed_stores for b in t.gpu_blocks if b.group_idx == 1)
    assert runner.scheduler.reset_prefix_cache()
    dense = _later_offload_hit_tokens(runner, stored, token_ids, dense=True)
    hit = _later_offload_hit_tokens(runner, stored, token_ids, dense=False)
    with open(os.environ["MEASURE_OUT"], "a") as f:
        f.write(json.dumps({"case": name, "swa_chunks_stored": swa, "hit": hit, "dense": dense}) + "\n")
