"""What more than one benchmark script uses: ``from lib.cuda import cuda_graph_seconds``."""
