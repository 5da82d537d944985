-- HAProxy's forward-auth call to tollgate: `http-request lua.tollgate`.
-- Sends the client's headers with X-Forwarded-For (the client's address
-- appended), X-Forwarded-Method, -Host, -Uri and -Proto, and leaves the
-- answer in txn variables for haproxy.cfg's rules.
local url = os.getenv("TOLLGATE_URL")

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

local skip = { ["host"] = true, ["content-length"] = true, ["connection"] = true,
    ["transfer-encoding"] = true, ["x-forwarded-for"] = true }

core.register_action("tollgate", { "http-req" }, function(txn)
    local incoming = txn.http:req_get_headers()
    local headers = {}
    for name, list in pairs(incoming) do
        if not skip[name] and not name:match("^x%-forwarded%-") then
            headers[name] = values(list)
        end
    end
    local xff = values(incoming["x-forwarded-for"])
    xff[#xff + 1] = txn.f:src()
    headers["x-forwarded-for"] = { table.concat(xff, ", ") }
    headers["x-forwarded-method"] = { txn.f:method() }
    headers["x-forwarded-uri"] = { txn.f:url() }
    headers["x-forwarded-proto"] = { "http" }
    local host = values(incoming["host"])[1]
    if host then
        headers["x-forwarded-host"] = { host }
    end

    local ok, response = pcall(function()
        return core.httpclient():get({ url = url, headers = headers, timeout = 1000 })
    end)
    if not ok or response == nil or not response.status or response.status == 0 then
        txn:set_var("txn.tollgate_status", 503)
        return
    end
    txn:set_var("txn.tollgate_status", response.status)
    local answer = response.headers or {}
    local function copy(name, var)
        local value = values(answer[name])[1]
        if value then
            txn:set_var(var, value)
        end
    end
    copy("retry-after", "txn.tollgate_retry_after")
    copy("ratelimit", "txn.tollgate_ratelimit")
    copy("ratelimit-policy", "txn.tollgate_ratelimit_policy")
end)
