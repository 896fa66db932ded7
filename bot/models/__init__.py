"""Model providers, the retry policy and the fallback chain. Provider SDKs are imported lazily."""
