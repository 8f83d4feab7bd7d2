"""Push delivery: messages sent to their queue's subscribers when they are due (Zaqar v2
subscriptions), from state kept in the store (``storage.deliveries``)."""
