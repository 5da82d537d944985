-- tollgate: a budget's charge (src/limiter/charge.rs), after src/prelude.lua
-- (the arguments, the clock, every limit's state): `cost` permits recorded
-- whether or not they fit, atomically over every limit of one key (the
-- core's AllOf), into each limit's debt by the core's rule for its
-- algorithm (GCRA, fixed window, calendar window, sliding window), the debt
-- capped per limit at `x`, the cap the client sends (the core's:
-- DEBT_PERIODS periods of the quota beyond full). The states are those the
-- checks read, so later checks and peeks of the same keys are refused until
-- the debt is repaid. A key under a control's marker (a list, a penalty in
-- force) is not charged: a denied key is refused anyway, an allowed one is
-- not counted. Warm-up limits are refused (no charge on Redis).
-- ARGV: decide.lua's, with op 'h'. Reply: {fitted, recorded, then what a
-- peek of one permit answers right after (decide.lua's reply, the core's
-- Charge::decision)}: fitted 1 when every limit is within its limit after
-- the charge, 0 when the charge went over (recorded), -1 under a marker
-- (nothing recorded); recorded, the fewest permits a limit recorded (the
-- rest reached its cap). The state after comes in the same call: a charge
-- is one round trip.
for i = 1, #KEYS do
  if not limits[i].alg.charge then return invalid() end
end

local function with(fitted, recorded, after)
  local reply = {fitted, recorded}
  for i = 1, #after do reply[i + 2] = after[i] end
  return reply
end

local mark, mark_end = marker()
if mark then return with(-1, 0, marked_reply(mark, mark_end, 1)) end

local fitted, recorded = 1, cost
for i = 1, #KEYS do
  local p = limits[i]
  local r, fit = p.alg.charge(KEYS[i], states[i], p, cost, p.x)
  if not fit then fitted = 0 end
  if r < recorded then recorded = r end
end
for i = 1, #KEYS do states[i] = limits[i].alg.load(KEYS[i], limits[i]) end
return with(fitted, recorded, verdicts(1))
