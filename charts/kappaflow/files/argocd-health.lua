-- Argo CD health check for kappaflow.io/StreamApp (kstatus-style conditions written by the operator).
-- Install: add it to argocd-cm as `resource.customizations.health.kappaflow.io_StreamApp` (see the
-- chart README). Order matters: stale status first, then failures, then pause, then readiness.
local hs = {}
if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the kappaflow operator to report status"
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end
local conditions = {}
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    conditions[c.type] = c
  end
end
local function describe(c)
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
end
for _, failed in ipairs({ "Stalled", "Degraded" }) do
  local c = conditions[failed]
  if c ~= nil and c.status == "True" then
    hs.status = "Degraded"
    hs.message = describe(c)
    return hs
  end
end
if (obj.spec ~= nil and obj.spec.suspend == true) or obj.status.phase == "Paused" then
  hs.status = "Suspended"
  hs.message = "Paused"
  if conditions["Ready"] ~= nil then
    hs.message = describe(conditions["Ready"])
  end
  return hs
end
local ready = conditions["Ready"]
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready)
  return hs
end
hs.status = "Progressing"
local reconciling = conditions["Reconciling"]
if reconciling ~= nil and reconciling.status == "True" then
  hs.message = describe(reconciling)
elseif ready ~= nil then
  hs.message = describe(ready)
else
  hs.message = "Waiting for the StreamApp to become ready"
end
return hs
