-- 004: AMD code-object metadata beside the NVIDIA figures. regs holds
-- architected VGPRs on AMD; agprs the accumulation VGPRs (gfx90a, gfx942),
-- sgprs the scalar registers, wave the wavefront size; occupancy the
-- theoretical waves per SIMD (gen/resources.c). Variants rejected for
-- their resources before timing get status 'rejected' with a detail that
-- starts "resources:".
ALTER TABLE variants ADD COLUMN agprs INTEGER;
ALTER TABLE variants ADD COLUMN sgprs INTEGER;
ALTER TABLE variants ADD COLUMN wave INTEGER;
ALTER TABLE variants ADD COLUMN occupancy INTEGER;
