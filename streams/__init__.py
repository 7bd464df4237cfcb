"""Stream processing: the event-time gate, rollups, idle windows and the drivers that run them."""
