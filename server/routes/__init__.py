"""One router per resource; ``octune.server.app`` mounts them under ``/v1``."""
