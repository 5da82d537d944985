-- HAProxy's forward-auth call to tollgate: `http-request lua.tollgate`.
-- Sends only what the rules read: X-Forwarded-For (the client's address
-- appended), X-Forwarded-Method, -Host, -Uri and -Proto as HAProxy saw the
-- request, and the first value of each header named in `forward` below;
-- leaves the answer in txn variables for haproxy.cfg's rules.
--
-- The call is one HTTP/1.1 request on a socket of its own (core.tcp), not
-- core.httpclient: HAProxy 2.6's httpclient crashes (SIGSEGV) when its
-- headers table holds more values than tune.http.maxhdr (101), and it
-- tries a request that timed out 3 more times (4 s for a 1 s timeout, and
-- up to 4 counts of one request by a slow tollgate).
local url = os.getenv("TOLLGATE_URL")
local host, port, path = url:match("^http://([^:/]+):(%d+)(/.*)$")

-- The client headers your rules read (lower case), one value each.
local forward = { "x-api-key" }

-- A tollgate that does not answer within this many seconds: refused (503).
local timeout = 1

-- A header's values, whatever indexing HAProxy's table uses.
local function values(list)
    local out = {}
    if type(list) ~= "table" then
        return { list }
    end
    local i = 0
    while list[i] ~= nil do
        out[#out + 1] = list[i]
        i = i + 1
    end
    for _, v in ipairs(list) do
        out[#out + 1] = v
    end
    return out
end

-- Sends `lines` (the request head); the status and the lower-case headers
-- of the answer (every line of each, joined by ", "), or nil.
local function ask(lines)
    local socket = core.tcp()
    socket:settimeout(timeout)
    if not socket:connect(host, tonumber(port)) then
        socket:close()
        return nil
    end
    if not socket:send(table.concat(lines, "\r\n") .. "\r\n\r\n") then
        socket:close()
        return nil
    end
    local status = tonumber(((socket:receive("*l")) or ""):match("^HTTP/1%.%d (%d%d%d)"))
    local headers = {}
    while status do
        local line = socket:receive("*l")
        if line == nil then
            status = nil
        elseif line == "" then
            break
        else
            local name, value = line:match("^([^:]+):%s*(.-)%s*$")
            if name then
                name = name:lower()
                headers[name] = headers[name] and (headers[name] .. ", " .. value) or value
            end
        end
    end
    socket:close()
    return status, headers
end

core.register_action("tollgate", { "http-req" }, function(txn)
    local incoming = txn.http:req_get_headers()
    local xff = values(incoming["x-forwarded-for"])
    xff[#xff + 1] = txn.f:src()
    local lines = {
        "GET " .. path .. " HTTP/1.1",
        "Host: " .. host .. ":" .. port,
        "Connection: close",
        "X-Forwarded-For: " .. table.concat(xff, ", "),
        "X-Forwarded-Method: " .. txn.f:method(),
        "X-Forwarded-Uri: " .. txn.f:url(),
        "X-Forwarded-Proto: http",
    }
    local function add(name, value)
        if value then
            lines[#lines + 1] = name .. ": " .. value
        end
    end
    add("X-Forwarded-Host", values(incoming["host"])[1])
    for _, name in ipairs(forward) do
        add(name, values(incoming[name])[1])
    end

    local ok, status, answer = pcall(ask, lines)
    if not ok or not status then
        txn:set_var("txn.tollgate_status", 503)
        return
    end
    txn:set_var("txn.tollgate_status", status)
    for name, var in pairs({
        ["retry-after"] = "txn.tollgate_retry_after",
        ["ratelimit"] = "txn.tollgate_ratelimit",
        ["ratelimit-policy"] = "txn.tollgate_ratelimit_policy",
    }) do
        if answer[name] then
            txn:set_var(var, answer[name])
        end
    end
end)
