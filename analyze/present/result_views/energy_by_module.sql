-- energy_by_module: which modules spend the energy?
-- From the registered `energy` table: pJ per module scope (a scope includes its children),
-- with its depth (1 = the root module).
SELECT model, preset, key AS scope, len(string_split(key, '.')) AS depth, pj
FROM energy WHERE breakdown = 'module'
