"""What needs the keystone extra (``pip install 'zaqar-delay[keystone]'``): keystonemiddleware's
token check (``auth_token``) and Keystone trusts for ``trust+`` subscribers (``trusts``)."""
