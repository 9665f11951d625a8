"""The capture's session: the Recorder and its stages, schedules and one-call scenarios, what
it does on a fork or in another thread, and the fast-path switches."""
