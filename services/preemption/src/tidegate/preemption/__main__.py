"""Entry point: ``python -m tidegate.preemption`` or the ``tidegate-preemption`` script."""

from tidegate.preemption.app import setup
from tidegate.preemption.config import Settings
from tidegate.runtime import run_service


def main() -> None:
    """Run the preemption service until SIGTERM (settings from env and TIDEGATE_CONFIG)."""
    run_service("preemption", Settings, setup)


if __name__ == "__main__":
    main()
