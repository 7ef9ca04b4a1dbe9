"""The gate's outbound network: every connection a manifest's URL makes passes through here."""
