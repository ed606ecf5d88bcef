"""A saved /metrics page read as sums: every sample of the prefix summed over its labels, histograms as their
_sum and _count lines; other metrics and comments are left out."""

from servelab.runner.server_metrics import sums_of

PAGE = """# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase.
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} 1.5
vllm:request_queue_time_seconds_count{engine="0",model_name="m"} 3.0
vllm:request_queue_time_seconds_sum{engine="1",model_name="m"} 0.5
vllm:request_queue_time_seconds_count{engine="1",model_name="m"} 1.0
vllm:num_requests_running 4.0
python_gc_objects_collected_total{generation="0"} 123.0
"""


def test_samples_are_summed_over_their_labels_and_other_prefixes_left_out():
    sums = sums_of(PAGE)
    assert sums == {
        "vllm:request_queue_time_seconds_sum": 2.0,
        "vllm:request_queue_time_seconds_count": 4.0,
        "vllm:num_requests_running": 4.0,
    }
