"""Module scopes and events: SpikingJelly's scope tracker, its grad hooks, the module catalog
and the module_events rows."""
