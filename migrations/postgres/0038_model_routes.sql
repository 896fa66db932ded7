-- Issue 15 item 6: a model per request. The HILO_MODEL_ROUTES rule that chose a call's chain (NULL: the default
-- chain, HILO_MODEL and its fallbacks).
ALTER TABLE model_calls ADD COLUMN route text;
