-- The extension is installed in schema agent with its settings defined.
SELECT extname, extversion, nspname
  FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE extname = 'sandbox_ext';
SELECT name, boot_val, unit, context FROM pg_settings
 WHERE name LIKE 'sandbox.%' AND name NOT IN ('sandbox.database', 'sandbox.jail_path')
 ORDER BY name;
-- A malformed tenant id is refused when it is set.
SET sandbox.org_id = 'not-a-uuid';
SET sandbox.org_id = '6f1c2a0e-3c4b-4d5e-8f90-123456789abc';
SHOW sandbox.org_id;
RESET sandbox.org_id;
-- Unknown settings under the reserved prefix are refused.
SET sandbox.no_such_setting = 1;
