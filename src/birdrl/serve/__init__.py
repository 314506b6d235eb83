"""The SQL-Act environment served to trainers in other processes or hosts, over OpenEnv's
protocol (`birdrl env serve`): the server, its wire models and a client. Needs the
``env-server`` extra."""
