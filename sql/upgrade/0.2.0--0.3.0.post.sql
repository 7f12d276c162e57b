-- sandbox_ext upgrade 0.2.0 -> 0.3.0, hand-written tail: state that needs
-- the definitions replayed before it (see the head, 0.2.0--0.3.0.sql).

-- 44_maintenance.sql (issue 27, item 6): the maintenance jobs of 0.2.0
-- connect to cron.host, "localhost" by default, which a server listening
-- only on a Unix socket refuses: they are pointed at this server the way a
-- new install points them (schedule, command and user kept).
SELECT agent._point_maintenance_jobs();
