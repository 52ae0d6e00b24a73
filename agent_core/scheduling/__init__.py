"""Schedules: ``recurrence`` (what a person typed, as cron, a step or one time; pure),
``fire_times`` (those as real instants across daylight saving; pure), ``service`` (created
from chat, listed, paused, resumed, deleted, and planned for the dispatcher). The rows are
in ``agent_core.storage.schedules``, the model's tools in ``agent_core.tools.schedule_tools``,
and the tick that fires due slots in ``workers.dispatcher``."""
