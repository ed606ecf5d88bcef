"""The request stream that the load generator sends and the simulator replays: lengths and send times."""
