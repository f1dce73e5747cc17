-- 002: lookups by problem (winner selection) and by variant (reuse across
-- problems) were full scans once databases grew past a few thousand rows.
CREATE INDEX measurements_by_problem ON measurements (device_id, problem_id, status);
CREATE INDEX variants_by_template ON variants (template, template_hash);
