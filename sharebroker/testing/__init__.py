"""Real brokers for tests: `running_broker()` (a context manager), `BrokerProcess`, and the pytest
plugin in `sharebroker.testing.plugin` (fixtures `sharebroker`, `sharebroker_factory`,
`sharebroker_topic`, `sharebroker_group`), which pytest loads by itself once sharebroker is
installed. Importing this package does not import pytest."""

from sharebroker.testing.process import BrokerProcess, running_broker, unique_name, wait_for
from sharebroker.testing.security import Acl, BrokerSecurity

__all__ = ["Acl", "BrokerProcess", "BrokerSecurity", "running_broker", "unique_name", "wait_for"]
