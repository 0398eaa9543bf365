"""The ``k8s`` fixture: manifest builders (:class:`tidegate.testing.manifests.Builders`)."""

import pytest

from tidegate.testing.manifests import Builders


@pytest.fixture
def k8s() -> Builders:
    """Manifest builders (fresh resourceVersion counter per test)."""
    return Builders()
