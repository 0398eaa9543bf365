"""Entry point: ``python -m tidegate.watcher`` or the ``tidegate-watcher`` script."""

from tidegate.runtime import run_service
from tidegate.watcher.app import setup
from tidegate.watcher.config import WatcherSettings


def main() -> None:
    """Run the watcher until SIGTERM (settings from env and ``TIDEGATE_CONFIG``)."""
    run_service("watcher", WatcherSettings, setup)


if __name__ == "__main__":
    main()
