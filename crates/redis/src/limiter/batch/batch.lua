-- tollgate, batch: several independent lean decisions in one script call.
-- Entry i is KEYS[i] with ARGV[11(i-1)+1 .. 11i], exactly the key and the
-- arguments of one lean call (src/script.rs, "Contract": one limit, `g` or
-- `f`, check or peek). Each entry is decided by gcra.lua or fixed.lua
-- themselves (their text is pasted below as the bodies of `gcra` and `fixed`
-- by src/limiter/batch.rs), in order, with no effect on the others: the
-- reply holds each entry's own reply, or its own error reply for an entry its
-- script refused. `TIME` is read once per call (the call is atomic: one
-- instant for every entry on the server's clock).
local real = redis
local T
local proxy = {
  pcall = real.pcall,
  error_reply = real.error_reply,
  call = function(command, ...)
    if command == 'TIME' then
      if not T then T = real.call('TIME') end
      return T
    end
    return real.call(command, ...)
  end,
}
