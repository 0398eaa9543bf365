"""Entry point: ``python -m tidegate.topology_cache`` or the ``tidegate-topology-cache`` script."""

from tidegate.runtime import run_service
from tidegate.topology_cache.app import setup
from tidegate.topology_cache.config import Settings


def main() -> None:
    """Run the topology-cache until SIGTERM (settings from env and TIDEGATE_CONFIG)."""
    run_service("topology-cache", Settings, setup)


if __name__ == "__main__":
    main()
