"""Pages in the state format, written by hand, shared by the agents' tests."""

from __future__ import annotations

from dreamgym.core import Observation, Task

TASK = Task(task_id="toy/login", instruction='Enter "lyda" as the username and press "Sign in".', site="toy")

# Three pages of one episode, in the abstract state format, written by hand.
PAGES = (
    Observation(
        state='[e1] heading "Sign in" [level=1]\n[e2] textbox "Username"\n[e3] button "Sign in"\n[e4] link "Help"',
        url="http://127.0.0.1:8000/login",
    ),
    Observation(
        state='[e1] heading "Sign in" [level=1]\n[e2] textbox "Username": lyda\n'
        '[e3] button "Sign in"\n[e4] link "Help"',
        url="http://127.0.0.1:8000/login",
        focused_id="e2",
    ),
    Observation(
        state='[e5] heading "Welcome, lyda" [level=1]\n[e6] button "Sign out"\n[e7] link "Settings"',
        url="http://127.0.0.1:8000/home",
        tabs=("Home", "Help"),
        last_action_error="",
    ),
)

BUTTONS = Observation(
    state='[e1] button "Yes"\n[e2] button "No"\n[e3] button "Maybe"\n[e4] button "Cancel"',
    goal='Click the "Maybe" button.',
)
