"""HTTP gateway: OpenAI schemas, SSE, scheduler, router, monitor, policy, metrics, CLI. No MLX imports."""
